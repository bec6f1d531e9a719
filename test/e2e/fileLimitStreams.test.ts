/**
 * The connections SSE streams may hold follow the connections actually served: when the open-file
 * limit serves fewer than BRAIN_MAX_CONNECTIONS, the reserve kept for other requests
 * (BRAIN_RESERVED_CONNECTIONS unset: a quarter) is a quarter of those served, not of the setting.
 * It used to be a quarter of the setting: on a 256-file process (32 connections served, 256
 * reserved) every session stream and every host's command stream was refused 503 (the operator
 * audit's finding). A real server started under `ulimit -n 256` with the defaults.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, logMessages, request, type ServerProcess, startServer, responseText } from "../support/server.js"

describe("SSE streams on a process whose open-file limit serves fewer connections than BRAIN_MAX_CONNECTIONS", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ entry: "product", fileLimit: 256 })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("the reserve is a quarter of the connections served: sessions' streams are served up to the rest less the hosts' eighth, then refused 503, and a host's command stream still gets its share", async () => {
    const warning = logMessages(server).map((m) => /the open-file limit \(\d+\) allows (\d+) connections/.exec(m)).find((m) => m !== null)
    expect(warning, server.output).toBeDefined()
    const served = Number(warning![1])
    expect(served).toBeLessThan(1024)
    const streams = served - Math.floor(served / 4)
    const readers = streams - Math.floor(streams / 8)
    expect(readers).toBeGreaterThan(0)
    const sessions: Array<string> = []
    for (let i = 0; i <= readers; i++) {
      const r = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
      expect(r.status, r.text).toBe(201)
      sessions.push(r.body.session_id)
    }
    const host = (await request(server.baseUrl, "/v1/hosts", { method: "POST" })).body as { host_id: string; token: string }
    const opened: Array<http.ClientRequest> = []
    const get = (p: string, headers: Record<string, string> = {}) =>
      new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.get(`${server.baseUrl}${p}`, { headers: { accept: "text/event-stream", ...headers }, agent: false }, resolve)
        req.on("error", reject)
        opened.push(req)
      })
    try {
      // One stream per session: a session's own share (an eighth of the readers' streams) is not what this checks.
      for (let i = 0; i < readers; i++) {
        const stream = await get(`/v1/sessions/${sessions[i]}/events?after=0`)
        expect(stream.statusCode, `stream ${i} of ${readers} (${served} connections served)`).toBe(200)
      }
      const refused = await get(`/v1/sessions/${sessions[readers]}/events?after=0`)
      expect(refused.statusCode).toBe(503)
      expect(JSON.parse(await responseText(refused))).toMatchObject({ code: "overloaded", retryable: true })
      const commands = await get(`/v1/hosts/${host.host_id}/commands`, { authorization: `Bearer ${host.token}` })
      expect(commands.statusCode).toBe(200)
      expect((await request(server.baseUrl, "/health/live")).status).toBe(204)
    } finally {
      for (const req of opened) req.destroy()
    }
    expect(server.exited).toBeUndefined()
  }, 120_000)
})
