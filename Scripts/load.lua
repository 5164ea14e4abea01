-- wrk script for `appattest serve` (Scripts/load.sh). Arguments after `--`:
--   MODE (ping | assert | faults)  REQUESTS-FILE  TOKEN  ACCEPTED-OUT  MAX-BODY-BYTES  THREADS (= wrk -t)
-- assert: POST /v1/assertions/verify with the lines of REQUESTS-FILE (`DEVICE<TAB>JSON`), each thread taking the
-- devices with DEVICE % threads == thread id, in file order, so that one device's requests are never in flight
-- together and arrive in counter order.
-- faults: the same, with malformed, unauthenticated, replayed and oversized requests mixed in.
-- Every response is classified by status and problem code; accepted ones give the highest counter per key (read from
-- their bodies after the run), written to ACCEPTED-OUT for `appattest-dev load check`.

local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  mode = args[1]
  token = args[3]
  acceptedout = args[4]
  maxbody = tonumber(args[5] or "131072")
  nthreads = tonumber(args[6] or "1")
  bodies = {}
  if mode ~= "ping" then
    for line in io.lines(args[2]) do
      local device, body = line:match("^(%d+)\t(.*)$")
      if device and (tonumber(device) % nthreads) == id then table.insert(bodies, body) end
    end
  end
  nextline = 1
  n = 0
  sent = {}
  received = {}
  accepted = {}
  recent = {}
  exhausted = 0
  oversized = '{"keyId":"' .. string.rep("A", maxbody) .. '"}'
  auth = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }
  noauth = { ["Content-Type"] = "application/json" }
  -- Each request is formatted before the run, so that the load generator, which shares the machine with the
  -- server, spends as little as it can per request while the run is measured.
  prepared = {}
  for i, body in ipairs(bodies) do prepared[i] = wrk.format("POST", "/v1/assertions/verify", auth, body) end
  lines = #prepared
  -- Only the faults mode sends bodies again; otherwise they go, halving what the collector walks through.
  if mode ~= "faults" then bodies = nil end
  ping = wrk.format("GET", "/ping")
  -- No collection while an assertion run is measured: with the fleet's keys in a table of the thread's, LuaJIT's
  -- share of wrk grew with the fleet (10 µs of the shared cores a request with 1,000 keys, 19.5 with 100,000, in
  -- perf), which scale.sh counted against the server; the responses are kept as they come instead, and read after
  -- the run (1.5–5 µs apart in two runs, each about 14 µs). Each response leaves its body and a table of its headers,
  -- about half a kilobyte: past a gigabyte (minutes of a run here) the kept responses are folded into `highest`, each
  -- key's highest accepted counter, and the collector starts again, so that a long run holds what the fleet needs.
  highest = {}
  responses = 0
  if mode ~= "ping" then
    collectgarbage("collect")
    collectgarbage("stop")
  end
end

local function count(t, k) t[k] = (t[k] or 0) + 1 end

-- Kept responses (200s) folded into each key's highest accepted counter and the received counts.
local function fold(bodies, highest, received)
  for _, body in ipairs(bodies) do
    local key = body:match('"keyId":"([^"]+)"')
    local c = tonumber(body:match('"counter":(%d+)'))
    if key and c then
      count(received, "accepted")
      if (highest[key] or 0) < c then highest[key] = c end
    else
      count(received, "status200")
    end
  end
end

local function valid()
  if nextline > lines then
    count(sent, "exhausted")
    return ping
  end
  local line = nextline
  nextline = nextline + 1
  if mode == "faults" then recent[#recent + 1] = bodies[line] end
  count(sent, "valid")
  return prepared[line]
end

function request()
  if mode == "ping" then return ping end
  n = n + 1
  if mode == "faults" then
    local r = n % 20
    if r == 3 then
      count(sent, "malformed")
      return wrk.format("POST", "/v1/assertions/verify", auth, '{"keyId":"!!","assertion":' .. n .. '}')
    elseif r == 7 then
      count(sent, "unauthenticated")
      return wrk.format("POST", "/v1/assertions/verify", noauth, bodies[1])
    elseif r == 11 and #recent > 500 then
      count(sent, "replayed")
      return wrk.format("POST", "/v1/assertions/verify", auth, recent[#recent - 500])
    elseif n % 200 == 13 then
      count(sent, "oversized")
      return wrk.format("POST", "/v1/assertions/verify", auth, oversized)
    end
  end
  return valid()
end

function response(status, headers, body)
  if mode == "ping" then count(received, "status" .. status); return end
  responses = responses + 1
  if responses % 65536 == 0 and collectgarbage("count") > 1048576 then
    fold(accepted, highest, received)
    accepted = {}
    collectgarbage("restart")
  end
  if status == 200 then
    -- Kept as it came and read in done(), after the run: a table keyed by keyId here grows with the fleet, and so does
    -- its cost (init, above).
    accepted[#accepted + 1] = body
  else
    count(received, (body:match('"code":"([^"]+)"') or ("status" .. status)) .. " " .. status)
  end
end

function done(summary, latency, requests)
  local totals = { sent = {}, received = {} }
  local keys = {}
  for _, thread in ipairs(threads) do
    for _, what in ipairs({ "sent", "received" }) do
      local t = thread:get(what)
      for k, v in pairs(t) do totals[what][k] = (totals[what][k] or 0) + v end
    end
    for k, v in pairs(thread:get("highest")) do
      if (keys[k] or 0) < v then keys[k] = v end
    end
    fold(thread:get("accepted"), keys, totals.received)
  end
  local seconds = summary.duration / 1e6
  io.write(string.format("RESULT mode=%s requests=%d rps=%.0f p50=%.2fms p99=%.2fms socket_errors=%d non2xx=%d\n", threads[1]:get("mode"),
    summary.requests, summary.requests / seconds, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
  for _, what in ipairs({ "sent", "received" }) do
    local names = {}
    for k in pairs(totals[what]) do table.insert(names, k) end
    table.sort(names)
    local parts = {}
    for _, k in ipairs(names) do table.insert(parts, k .. "=" .. totals[what][k]) end
    io.write(what:upper() .. " " .. table.concat(parts, ", ") .. "\n")
  end
  local out = threads[1]:get("acceptedout")
  if out then
    local f = io.open(out, "w")
    for k, v in pairs(keys) do f:write(k .. " " .. v .. "\n") end
    f:close()
  end
end
