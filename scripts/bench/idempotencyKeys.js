#!/usr/bin/env node
// The heap one live idempotency key costs in a real server: `bin/brain.js serve` (as `npm start`
// runs it, a fresh data directory, --expose-gc) takes keyed `POST /v1/sessions/{id}/cancel`
// requests on one idle session, each with a new key of --key-bytes bytes (default 256, the most
// a key may have), 32 at a time. At N = 0, ¼, ½, ¾ and all of --keys (default 100000) the server
// makes three full collections and reports its heap (heapUsed + external + arrayBuffers); the
// cost per key is the least-squares slope. A cancel's answer stays in the log file, never in
// memory, so the slope is the index's own cost. BRAIN_MAX_IDEMPOTENCY_KEYS and
// BRAIN_MAX_SESSION_LOG_KEYS (one session's share) are set above --keys.
//
//   node scripts/bench/idempotencyKeys.js [--keys 100000] [--key-bytes 256]
import { expectStatus, request, slope, startBrain } from "./lib.js"
import { numberFlag } from "./stats.js"

const keys = numberFlag("--keys", 100_000)
const keyBytes = numberFlag("--key-bytes", 256)
const CONCURRENCY = 32
const server = await startBrain({ gc: true, env: { BRAIN_MAX_IDEMPOTENCY_KEYS: String(keys + 1), BRAIN_MAX_SESSION_LOG_KEYS: String(keys + 1) } })
try {
  const created = await expectStatus(request(server.port, "POST", "/v1/sessions", { model: { provider: "scripted" } }), 201)
  const cancel = `/v1/sessions/${created.session_id}/cancel`
  const keyOf = (i) => `k${i}-`.padEnd(keyBytes, "p")
  // One key first, so that the route's code and caches are in place before the first figure.
  await expectStatus(request(server.port, "POST", cancel, undefined, { "idempotency-key": keyOf(keys) }), 200)
  const points = [[0, await server.heapAfterGc()]]
  let next = 0
  for (const step of [1, 2, 3, 4]) {
    const until = Math.round((keys * step) / 4)
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next < until) await expectStatus(request(server.port, "POST", cancel, undefined, { "idempotency-key": keyOf(next++) }), 200)
    }))
    points.push([until, await server.heapAfterGc()])
  }
  const MiB = 1024 * 1024
  console.log(`keys of ${keyBytes} bytes; heap after three full collections (--expose-gc), MiB at each N`)
  console.log("")
  console.log("| keys | heap MiB | per key |")
  console.log("| ---: | ---: | ---: |")
  for (const [n, heap] of points) console.log(`| ${n} | ${(heap / MiB).toFixed(1)} | |`)
  console.log(`| slope | | ${Math.round(slope(points))} B |`)
} finally {
  await server.stop()
}
