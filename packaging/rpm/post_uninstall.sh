# systemd re-reads its units; after an upgrade ($1 >= 1) a running broker is restarted on the
# new binary (%systemd_postun_with_restart). /var/lib/mssbroker (the database) is never removed.
systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -ge 1 ]; then
  systemctl try-restart mssbroker.service >/dev/null 2>&1 || :
fi
