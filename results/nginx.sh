# Shared by the result scripts that run nginx beside the gateways (sourced
# after NGX, a directory nginx's workers can reach, and WORKERS are set).

# free_port: a TCP port on 127.0.0.1 that is free now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# nginx_conf NAME HTTP-BLOCK: writes $NGX/NAME.conf (WORKERS workers, its
# pid, logs and temporary files under $NGX, no access log, long keep-alive,
# bodies up to 64 MiB) with HTTP-BLOCK inside `http {}`, and starts it.
nginx_conf() {
  cat >"$NGX/$1.conf" <<CONF
worker_processes $WORKERS;
pid $NGX/$1.pid;
error_log $NGX/$1.error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $NGX/$1.body;
  proxy_temp_path $NGX/$1.proxy;
  fastcgi_temp_path $NGX/$1.fcgi;
  uwsgi_temp_path $NGX/$1.uwsgi;
  scgi_temp_path $NGX/$1.scgi;
  keepalive_requests 1000000;
  client_max_body_size 64m;
  $2
}
CONF
  nginx -p "$NGX" -c "$NGX/$1.conf" -e "$NGX/$1.stderr.log"
}

# nginx_static PORT: starts the static upstream "static" on 127.0.0.1:PORT,
# answering every request with one fixed JSON-RPC reply (`return 200`).
nginx_static() {
  nginx_conf static "
  server {
    listen 127.0.0.1:$1;
    default_type application/json;
    location / { return 200 '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0x10d4f\"}'; }
  }"
}
