-- wrk script for scripts/load: POSTs a short completion and counts replies by HTTP status.
-- The per-thread counts are summed in done() and printed as one JSON line.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do
      total[status] = (total[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(total) do
    table.insert(parts, string.format('"%d": %d', status, n))
  end
  local e = summary.errors
  io.write(string.format(
    'LOAD {"requests": %d, "seconds": %.2f, "p50_ms": %.1f, "p99_ms": %.1f, ' ..
    '"socket_errors": %d, "timeouts": %d, "statuses": {%s}}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3,
    latency:percentile(99) / 1e3, e.connect + e.read + e.write, e.timeout,
    table.concat(parts, ", ")))
end
