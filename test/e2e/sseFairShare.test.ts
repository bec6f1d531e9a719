/**
 * One session's readers cannot take every stream (docs/operations.md, "Connections"): by default a
 * session may hold an eighth of the streams sessions' readers may take, and sessions' readers
 * never take the eighth of the stream connections kept for hosts' command streams, so that a
 * host reconnecting its command stream is never refused for other tenants' readers. A per-session
 * bound set above what readers may take is lowered to it, with a warning at start.
 *
 * Real servers with small settings: 68 connections, 4 of them reserved for other requests, leave
 * 64 to streams; 8 of those are kept for command streams, 56 for sessions' readers, 7 a session.
 */
import * as http from "node:http"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

const MAX_CONNECTIONS = 68
const RESERVED = 4
const STREAMS = MAX_CONNECTIONS - RESERVED
const FOR_HOSTS = STREAMS / 8
const FOR_READERS = STREAMS - FOR_HOSTS
const PER_SESSION = FOR_READERS / 8

describe("one session's readers and other sessions' and hosts' streams", () => {
  let server: ServerProcess | undefined
  const held: Array<http.ClientRequest> = []
  afterEach(async () => {
    for (const s of held.splice(0)) s.destroy()
    await server?.dispose()
    server = undefined
  })

  const start = async (env: Record<string, string> = {}) => {
    ensureBuilt()
    server = await startServer({
      env: { BRAIN_MAX_CONNECTIONS: String(MAX_CONNECTIONS), BRAIN_RESERVED_CONNECTIONS: String(RESERVED), ...env }
    })
    return server
  }
  const created = async (s: ServerProcess) => {
    const r = await request(s.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }
  const registered = async (s: ServerProcess) => {
    const r = await request(s.baseUrl, "/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body as { host_id: string; token: string }
  }
  const get = (s: ServerProcess, p: string, headers: Record<string, string> = {}) =>
    new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.get(`${s.baseUrl}${p}`, { headers: { accept: "text/event-stream", ...headers }, agent: false }, resolve)
      req.on("error", reject)
      held.push(req)
    })
  const reader = (s: ServerProcess, session: string) => get(s, `/v1/sessions/${session}/events?after=0`)
  const commands = (s: ServerProcess, host: { host_id: string; token: string }) =>
    get(s, `/v1/hosts/${host.host_id}/commands`, { authorization: `Bearer ${host.token}` })
  const refusal = (response: http.IncomingMessage) =>
    new Promise<{ status: number | undefined; body: { code?: string; retryable?: boolean; message?: string } }>((resolve) => {
      // An open stream never ends: its status is the answer.
      if (response.statusCode === 200) return resolve({ status: 200, body: {} })
      let t = ""
      response.setEncoding("utf8")
      response.on("data", (c: string) => (t += c))
      response.on("end", () => resolve({ status: response.statusCode, body: JSON.parse(t) }))
    })

  it(`by default one session holds at most ${PER_SESSION} readers (an eighth of the ${FOR_READERS} readers' streams): its next reader is refused 503 naming BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION, and another session's reader still connects`, async () => {
    const s = await start()
    const [greedy, other] = [await created(s), await created(s)]
    for (let i = 0; i < PER_SESSION; i++) expect((await reader(s, greedy)).statusCode).toBe(200)
    const refused = await refusal(await reader(s, greedy))
    expect(refused.status).toBe(503)
    expect(refused.body).toMatchObject({ code: "overloaded", retryable: true, message: expect.stringContaining("BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION") })
    expect((await reader(s, other)).statusCode).toBe(200)
  }, 120_000)

  it(`sessions' readers never take the ${FOR_HOSTS} stream connections kept for hosts' command streams: with every readers' stream held, a reader is refused 503 and a host's command stream connects, up to every stream connection`, async () => {
    const s = await start()
    // One request at a time: parallel requests would each keep a connection, and the connections
    // left beside the streams are few here.
    const sessions: Array<string> = []
    for (let i = 0; i < FOR_READERS / PER_SESSION; i++) sessions.push(await created(s))
    for (const session of sessions) {
      for (let i = 0; i < PER_SESSION; i++) expect((await reader(s, session)).statusCode).toBe(200)
    }
    const late = await refusal(await reader(s, await created(s)))
    expect(late.status).toBe(503)
    expect(late.body).toMatchObject({ code: "overloaded", retryable: true, message: expect.stringContaining("command streams") })
    const hosts: Array<{ host_id: string; token: string }> = []
    for (let i = 0; i <= FOR_HOSTS; i++) hosts.push(await registered(s))
    for (let i = 0; i < FOR_HOSTS; i++) expect((await commands(s, hosts[i]!)).statusCode).toBe(200)
    // Every stream connection is held now: the next command stream is refused as before, and the
    // connections kept for other requests still serve them.
    const full = await refusal(await commands(s, hosts[FOR_HOSTS]!))
    expect(full.status).toBe(503)
    expect(full.body).toMatchObject({ code: "overloaded", retryable: true, message: expect.stringContaining("BRAIN_RESERVED_CONNECTIONS") })
    expect((await request(s.baseUrl, `/v1/sessions/${sessions[0]}`)).status).toBe(200)
    expect((await request(s.baseUrl, "/health/ready")).status).toBe(204)
  }, 120_000)

  it(`a BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION above the readers' streams (${FOR_READERS}) is lowered to them with a warning at start; a session holding them all still leaves hosts their streams`, async () => {
    const s = await start({ BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION: "1000" })
    expect(`${s.lines.join("\n")}\n${s.stderr}`).toMatch(new RegExp(`BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION \\(1000\\).*${FOR_READERS}`))
    const greedy = await created(s)
    for (let i = 0; i < FOR_READERS; i++) expect((await reader(s, greedy)).statusCode).toBe(200)
    expect((await refusal(await reader(s, greedy))).status).toBe(503)
    expect((await commands(s, await registered(s))).statusCode).toBe(200)
  }, 120_000)
})
