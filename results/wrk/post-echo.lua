-- wrk: POST the same small JSON-RPC request the closed-64 scenario sends.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"echo","params":{"n":1}}'
