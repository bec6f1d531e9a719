/**
 * Hosts' command streams (`GET /v1/hosts/{id}/commands`) are SSE streams like a session's: they
 * share the connections streams may take, BRAIN_MAX_CONNECTIONS less BRAIN_RESERVED_CONNECTIONS,
 * so that hosts that stay connected cannot lock the API out (nor their own results, which need a
 * connection of their own). A real server with 10 connections, 4 of them reserved.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, startServer, responseText } from "../support/server.js"

const MAX_CONNECTIONS = 10
const RESERVED = 4

describe("hosts' command streams and the connections kept for other requests", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_MAX_CONNECTIONS: String(MAX_CONNECTIONS), BRAIN_RESERVED_CONNECTIONS: String(RESERVED) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it(`command streams and session streams together take at most BRAIN_MAX_CONNECTIONS − BRAIN_RESERVED_CONNECTIONS (${MAX_CONNECTIONS - RESERVED}): the next host stream is refused 503 naming the setting, results and reads are still served, and a stream that closes frees its connection`, async () => {
    const hosts: Array<{ host_id: string; token: string }> = []
    for (let i = 0; i < MAX_CONNECTIONS; i++) {
      const r = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
      expect(r.status, r.text).toBe(201)
      hosts.push(r.body)
    }
    const session = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
    const streams: Array<http.ClientRequest> = []
    const get = (p: string, headers: Record<string, string>) =>
      new Promise<http.IncomingMessage>((resolve, reject) => {
        const req = http.get(`${server.baseUrl}${p}`, { headers: { accept: "text/event-stream", ...headers }, agent: false }, resolve)
        req.on("error", reject)
        streams.push(req)
      })
    const commands = (host: { host_id: string; token: string }) => get(`/v1/hosts/${host.host_id}/commands`, { authorization: `Bearer ${host.token}` })
    try {
      // One session stream, and host streams for the rest of the streams' share.
      expect((await get(`/v1/sessions/${session}/events?after=0`, {})).statusCode).toBe(200)
      for (let i = 0; i < MAX_CONNECTIONS - RESERVED - 1; i++) expect((await commands(hosts[i]!)).statusCode).toBe(200)
      const refused = await commands(hosts[MAX_CONNECTIONS - RESERVED]!)
      expect(refused.statusCode).toBe(503)
      expect(JSON.parse(await responseText(refused))).toMatchObject({ code: "overloaded", retryable: true, message: expect.stringContaining("BRAIN_RESERVED_CONNECTIONS") })
      // A session stream is refused as well: they share the bound.
      expect((await get(`/v1/sessions/${session}/events?after=0`, {})).statusCode).toBe(503)
      // The reserve serves everything else: reads, readiness, and a host's result.
      const host = hosts[0]!
      const result = await request(server.baseUrl, `/v1/hosts/${host.host_id}/results`, {
        json: { session_id: session, sequence: 1, ok: 1 },
        headers: { authorization: `Bearer ${host.token}` }
      })
      expect(result.status, result.text).toBe(409)
      expect((await request(server.baseUrl, `/v1/sessions/${session}`)).status).toBe(200)
      expect((await request(server.baseUrl, "/health/ready")).status).toBe(204)
      // A host stream that closes gives its connection back: the refused host now gets its stream.
      streams[1]!.destroy()
      await eventually("a freed stream connection", async () => {
        const again = await commands(hosts[MAX_CONNECTIONS - RESERVED]!)
        if (again.statusCode === 200) return true
        again.resume()
        return undefined
      }, 10_000, 100)
    } finally {
      for (const s of streams) s.destroy()
    }
  }, 60_000)
})
