/**
 * Unusual answers of an http Environment through a real server (with no tool deadline:
 * BRAIN_MAX_TOOL_SECS=0, so a lost answer would leave the session running for good). The
 * Environment is a node:http server in this process, bound once with a token (`token_env`, whose
 * answers are redacted) and once without: what the journal records and what the model is shown
 * is the same for both.
 *
 * - A 200 `{"ok": v}` nested past 64 levels is the call's `error` `invalid_output` at once
 *   (docs/environments.md, "How Brain reads an answer"), and the turn goes on.
 * - Members named `__proto__`, `constructor` and `prototype` are recorded and shown as sent.
 */
import * as http from "node:http"
import type * as net from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, logMessages, request, type ServerProcess, startServer } from "../support/server.js"

const TOKEN = "tok-e2e-answers-71c0d9a4e5"
const PROTO = `{"__proto__":{"x":1},"constructor":{"prototype":2},"y":"${TOKEN}"}`

describe("unusual answers of an http Environment through a real server", () => {
  let env: http.Server
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    env = http.createServer((req, res) => {
      let text = ""
      req.setEncoding("utf8")
      req.on("data", (c: string) => (text += c))
      req.on("end", () => {
        const name = req.url === "/tools/call" ? (JSON.parse(text) as { name: string }).name : ""
        const ok = name === "deep" ? `${"[".repeat(2000)}"${TOKEN}"${"]".repeat(2000)}` : name === "proto" ? PROTO : "{}"
        res.writeHead(200, { "content-type": "application/json" }).end(`{"ok":${ok}}`)
      })
    })
    await new Promise<void>((resolve) => env.listen(0, "127.0.0.1", resolve))
    const url = `http://127.0.0.1:${(env.address() as net.AddressInfo).port}`
    const bindings = { secured: { driver: "http", base_url: url, token_env: "E2E_ANSWERS_TOKEN" }, plain: { driver: "http", base_url: url } }
    server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify(bindings), E2E_ANSWERS_TOKEN: TOKEN, BRAIN_MAX_TOOL_SECS: "0" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    env?.closeAllConnections()
    await new Promise<void>((resolve) => (env ? env.close(() => resolve()) : resolve()))
  })

  /** A session on `binding` whose scripted model calls `tool` once, then says "done"; its turn's answer, events and tool message. */
  const turnOf = async (binding: string, tool: string) => {
    const created = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: tool, input: {} }] }, { text: "done" }] },
        environments: [{ name: "box", driver: "http", binding }],
        tools: [{ name: tool, description: "answers oddly", environment: "box" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const sent = await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    const events = (await request(server.baseUrl, `/v1/sessions/${id}/events`)).body.events as Array<{ kind: string; data: any }>
    const transcript = (await request(server.baseUrl, `/v1/sessions/${id}/transcript`)).body.messages as Array<{ role: string; content: string }>
    return { sent, ended: events.find((e) => e.kind === "tool_call_ended")?.data, tool: transcript.find((m) => m.role === "tool")?.content }
  }

  it("an answer nested past 64 levels is the call's error invalid_output at once, with a token configured as without one, and the turn ends", async () => {
    for (const binding of ["secured", "plain"]) {
      const { sent, ended } = await turnOf(binding, "deep")
      expect(sent.status, `${binding}: ${sent.text}`).toBe(200)
      expect(sent.body.turn, binding).toMatchObject({ status: "ended", result: { text: "done" } })
      expect(ended, binding).toMatchObject({ outcome: "error", is_error: true, output: { code: "invalid_output" } })
      expect(ended.output.message, binding).toContain("nests deeper than 64 levels")
    }
  }, 60_000)

  it("members named __proto__, constructor and prototype are recorded and shown to the model as sent; only the token is redacted", async () => {
    for (const binding of ["secured", "plain"]) {
      const { sent, ended, tool } = await turnOf(binding, "proto")
      expect(sent.status, `${binding}: ${sent.text}`).toBe(200)
      const expected = binding === "secured" ? PROTO.replace(TOKEN, "<redacted>") : PROTO
      expect(ended.outcome).toBe("ok")
      expect(JSON.stringify(ended.output), binding).toBe(expected)
      expect(tool, binding).toBe(expected)
    }
  }, 60_000)
})

describe("an http Environment binding with a placeholder credential", () => {
  it("the server says once at start that the binding's credential shorter than MIN_REDACTED_KEY_CHARS is not redacted, naming the binding and never the value; a binding with a long token gets no such word", async () => {
    ensureBuilt()
    const bindings = { local: { driver: "http", base_url: "http://127.0.0.1:9", token_env: "E2E_SHORT_TOKEN" }, secured: { driver: "http", base_url: "http://127.0.0.1:9", token_env: "E2E_LONG_TOKEN" } }
    const server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify(bindings), E2E_SHORT_TOKEN: "q~z", E2E_LONG_TOKEN: TOKEN } })
    try {
      const said = await eventually("the listening line", async () => (logMessages(server).some((m) => m.startsWith("brain listening")) ? logMessages(server) : undefined))
      const warnings = said.filter((m) => m.includes("is not redacted"))
      expect(warnings).toEqual([expect.stringMatching(/^environment binding local: a credential of it is shorter than 16 characters/)])
      expect(server.output).not.toContain("q~z")
    } finally {
      await server.dispose()
    }
  }, 120_000)
})
