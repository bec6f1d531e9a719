// A whole http Environment (docs/environments.md) with one tool: `node examples/environment.mjs [port]`.
import http from "node:http"
const tools = { word_count: ({ text = "" } = {}) => ({ words: String(text).split(/\s+/).filter(Boolean).length }) }
const answered = new Map() // `${path} ${session_id} ${sequence}` → its answer: act on each operation once
const reply = (res, status, body) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))
const paths = new Set(["/setup", "/detach", "/teardown", "/tools/call", "/tools/cancel"])
http.createServer(async (req, res) => {
  if (req.method !== "POST" || !paths.has(req.url)) return reply(res, 404, { code: "not_found", message: `no operation ${req.method} ${req.url}` })
  let body = ""
  for await (const chunk of req) body += chunk
  let op
  try { op = JSON.parse(body) } catch { return reply(res, 400, { code: "invalid_request", message: "the body is not JSON" }) }
  const name = (path) => `${path} ${op.session_id} ${op.sequence}`
  if (answered.has(name(req.url))) return reply(res, 200, answered.get(name(req.url)))
  let answer
  if (req.url === "/tools/cancel") {
    // The tool answers at once, so a call it has received is finished: not stopped (its answer has
    // its outcome). One not received yet is stopped: remembered, and refused with 409 if it comes.
    answer = { stopped: !answered.has(name("/tools/call")) }
  } else if (req.url === "/tools/call") {
    if (answered.get(name("/tools/cancel"))?.stopped) return reply(res, 409, { code: "cancelled", message: "this call was cancelled before it arrived" })
    const tool = Object.hasOwn(tools, op.name) ? tools[op.name] : undefined
    answer = tool ? { ok: tool(op.input) } : { error: `no tool ${op.name}` }
  } else answer = { ok: {} }
  answered.set(name(req.url), answer)
  reply(res, 200, answer)
}).listen(Number(process.argv[2] ?? 8088), "127.0.0.1", function() { console.log(`environment on http://127.0.0.1:${this.address().port}`) })
