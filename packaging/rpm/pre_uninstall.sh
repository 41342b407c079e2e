# Removal, not upgrade ($1 = 0): stop and disable the broker (%systemd_preun).
if [ "$1" -eq 0 ]; then
  systemctl --no-reload disable --now mssbroker.service >/dev/null 2>&1 || :
fi
