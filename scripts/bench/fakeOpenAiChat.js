#!/usr/bin/env node
// A fake OpenAI-compatible Chat Completions server for the model benchmark (its own process, so
// its work is not the server's or the client's). Each POST …/chat/completions is answered with a
// stream of TOKENS content chunks, usage and [DONE]: one chunk every FAKE_GAP_MS milliseconds (as
// a model streams), or all back to back with FAKE_GAP_MS=0.
// It records, on the system-wide monotonic clock (process.hrtime, CLOCK_MONOTONIC, shared by every
// process of the machine), when each request's body had arrived, when its first and its last byte
// were written; GET /timings answers them as JSON. It prints `listening <port>` when ready.
import * as http from "node:http"

const TOKENS = Number(process.env.FAKE_TOKENS ?? 200)
const GAP_MS = Number(process.env.FAKE_GAP_MS ?? 1)
const now = () => Number(process.hrtime.bigint()) / 1e6 // milliseconds, monotonic, machine-wide
const timings = []

const chunk = (delta, finish = null) =>
  `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 1, model: "bench", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`
const usage = `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 1, model: "bench", choices: [], usage: { prompt_tokens: 10, completion_tokens: TOKENS, total_tokens: TOKENS + 10 } })}\n\n`
const body = [chunk({ role: "assistant", content: "" }), ...Array.from({ length: TOKENS }, (_, i) => chunk({ content: ` t${i}` })), chunk({}, "stop"), usage, "data: [DONE]\n\n"]

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/timings") {
    res.writeHead(200, { "content-type": "application/json" })
    return res.end(JSON.stringify(timings))
  }
  req.resume()
  req.on("end", () => {
    const t = { arrived: now(), first: 0, last: 0 }
    res.writeHead(200, { "content-type": "text/event-stream" })
    // One write per chunk, as a provider streams them; `first` is the first content chunk's.
    let i = 0
    const next = () => {
      if (i === 1) t.first = now()
      if (GAP_MS === 0) {
        if (i === 0) {
          res.write(body[i++])
          t.first = now()
        }
        while (i < body.length) res.write(body[i++])
      } else res.write(body[i++])
      if (i < body.length) return void setTimeout(next, GAP_MS)
      res.end(() => {
        t.last = now()
        timings.push(t)
      })
    }
    next()
  })
})
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`))
