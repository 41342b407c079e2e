# The system user (sysusers.d, as the .deb's postinst does), then systemd re-reads its units.
# Not enabled or started: `systemctl enable --now mssbroker` (docs/operations.md).
systemd-sysusers /usr/lib/sysusers.d/mssbroker.conf || :
systemctl daemon-reload >/dev/null 2>&1 || :
