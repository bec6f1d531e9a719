// A whole http Environment (docs/environments.md) with one tool: `node examples/environment.mjs [port]`.
import http from "node:http"
const tools = { word_count: ({ text = "" }) => ({ words: String(text).split(/\s+/).filter(Boolean).length }) }
const answered = new Map() // an operation is named by {session_id, sequence}: act on each one once
http.createServer(async (req, res) => {
  let body = ""
  for await (const chunk of req) body += chunk
  const op = JSON.parse(body), name = `${req.url} ${op.session_id} ${op.sequence}`
  const tool = tools[op.name]
  const answer = answered.get(name) ?? (req.url === "/tools/call" ? (tool ? { ok: tool(op.input) } : { error: `no tool ${op.name}` }) : req.url === "/tools/cancel" ? { stopped: false } : { ok: {} })
  answered.set(name, answer)
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer))
}).listen(Number(process.argv[2] ?? 8088), "127.0.0.1", function() { console.log(`environment on http://127.0.0.1:${this.address().port}`) })
