#!/usr/bin/env node
// What finding a loop's transcript tail costs an activation as a tool-loop conversation grows:
// the scan of the whole transcript (transcriptTailStart, what every activation did before the
// session's state kept its unanswered calls) against the tail taken from the calls the state
// keeps (transcriptTail with them), and what keeping them costs each turn's fold. In one run,
// on the same transcripts: turns of 2 rounds × 4 tool calls (12 messages each, 8 of them results).
//
//   npm run build && node scripts/bench/tail.js
import { noUnanswered, transcriptTail, transcriptTailStart, unansweredAfter } from "../../dist/domain/TranscriptTail.js"

let id = 0
const turn = () => {
  const out = [{ role: "user", content: "go" }]
  for (let r = 0; r < 2; r++) {
    const calls = Array.from({ length: 4 }, () => ({ id: `call_${(id++).toString(36)}_abcdefgh`, name: "echo", input: {} }))
    out.push({ role: "assistant", content: "", tool_calls: calls })
    for (const c of calls) out.push({ role: "tool", tool_call_id: c.id, content: "x" })
  }
  out.push({ role: "assistant", content: "done" })
  return out
}

/** µs per call of `f`, the best of five rounds of `n`. */
const time = (f, n) => {
  let best = Infinity
  for (let k = 0; k < 5; k++) {
    const t0 = performance.now()
    for (let i = 0; i < n; i++) f()
    best = Math.min(best, ((performance.now() - t0) * 1000) / n)
  }
  return best
}

console.log("method: node " + process.version + ", one thread, the best of 5 rounds; a conversation of N tool-loop turns (12 messages each)")
console.log("| turns | messages | scan per activation µs | tail from the kept calls µs | keeping them, per turn's fold µs |")
console.log("| ---: | ---: | ---: | ---: | ---: |")
for (const turns of [25, 250, 1000]) {
  const transcript = []
  let calls = noUnanswered
  for (let i = 0; i < turns; i++) {
    const t = turn()
    calls = unansweredAfter(calls, transcript.length, t)
    transcript.push(...t)
  }
  const n = turns >= 1000 ? 500 : 5000
  const scan = time(() => transcriptTailStart(transcript), n)
  const kept = time(() => transcriptTail(transcript, calls), 200_000)
  const next = turn()
  const fold = time(() => unansweredAfter(calls, transcript.length, next), 200_000)
  console.log(`| ${turns} | ${transcript.length} | ${scan.toFixed(1)} | ${kept.toFixed(2)} | ${fold.toFixed(2)} |`)
}
