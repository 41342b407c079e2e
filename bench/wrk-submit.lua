-- wrk script: POST single requests with unique client_request_ids over five groups.
-- Usage: wrk -t2 -c64 -d10s -s bench/wrk-submit.lua http://127.0.0.1:8080
local threads = {}
local modes = { {"analysis","higgs"}, {"analysis","top"}, {"reprocessing","x"}, {"mc","top"}, {"datataking","daq"} }

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  prefix = tostring(os.time()) .. "-" .. tostring(tid)
end

function request()
  counter = counter + 1
  local m = modes[(counter % #modes) + 1]
  local body = string.format(
    '{"client_request_id":"w%s-%d","station":"station-%d","user":"bench","file":"/pnfs/bench/%d","size_bytes":%d,"access_mode":"%s","physics_group":"%s"}',
    prefix, counter, tid, counter, 1000000000 + (counter % 1000) * 1000000, m[1], m[2])
  -- The shipped demo operator token; operators may submit for any station.
  return wrk.format("POST", "/v1/requests", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer demo-operator"}, body)
end

function response(status, headers, body)
  if status ~= 202 then
    io.stderr:write("unexpected status " .. status .. ": " .. body .. "\n")
  end
end
