/**
 * Keyed creates, ends, deletes and module uploads and removals retried during a graceful stop,
 * against a real server process and SIGTERM (docs/operations.md, "Stopping"; docs/api.md,
 * Idempotency): a retry whose key holds an answer gets that answer byte for byte (a create's the
 * same session id), never the refusal of new work; a key the server does not hold is refused 503
 * `overloaded` having done nothing (no session created, ended or deleted, no module stored or
 * removed) and kept nothing under the key, so that it runs once the server is back. A slow tool's
 * turn on another session holds the drain open meanwhile.
 *
 * A host's registration and removal keep no answer under their key (a registration's answer holds
 * the host's token, a secret the idempotency store never keeps): while draining, both are refused
 * 503 `overloaded` as new work, the retry of a registration answered before the stop included,
 * having written nothing, so that each runs once the server is back.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"
import { helloLoop, padded } from "../support/wat.js"

/** Milliseconds the slow tool takes: the drain stays open while the retries are answered (a hang guard, not a timing claim). */
const TOOL_MS = 20_000
/** What the server logs when it stops admitting work. */
const STOPPING = "admitting no new work"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

type Answer = { status: number; text: string; body: any; error?: string | undefined }

/** An answer, or how its connection failed. */
const call = (s: ServerProcess, p: string, options: Parameters<typeof request>[2] = {}): Promise<Answer> =>
  request(s.baseUrl, p, options).then(
    (r) => ({ status: r.status, text: r.text, body: r.body, error: undefined }),
    (e: unknown) => ({ status: 0, text: "", body: undefined, error: String((e as Error)?.cause ?? e) })
  )

const keyed = (key: string, more: Record<string, string> = {}) => ({ "idempotency-key": key, ...more })
const wasm = (raw: Uint8Array, key?: string) => ({ raw, headers: { "content-type": "application/wasm", ...(key ? { "idempotency-key": key } : {}) } })

const CREATE = { model: { provider: "scripted", replies: [{ text: "hi" }] } }

const created = async (s: ServerProcess) => {
  const r = await call(s, "/v1/sessions", { json: CREATE })
  expect(r.status, r.text).toBe(201)
  return r.body.session_id as string
}

const ended = async (s: ServerProcess) => {
  const id = await created(s)
  const r = await call(s, `/v1/sessions/${id}/end`, { method: "POST" })
  expect(r.status, r.text).toBe(200)
  return id
}

/** The lines of the host registry (HostsFile.ts): what a registration or a removal writes. */
const hostLines = (s: ServerProcess) => {
  const file = path.join(s.dataDir, "hosts", "registrations.jsonl")
  return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
}

/** The sessions the data directory holds. */
const sessionDirs = (s: ServerProcess) => fs.readdirSync(path.join(s.dataDir, "sessions")).filter((n) => !n.startsWith(".")).sort()

const expectAnswer = (what: string, retry: Answer, first: Answer, output: string) => {
  expect(retry.error, `${what}: ${output}`).toBeUndefined()
  expect(retry.status, `${what}: ${retry.text}`).toBe(first.status)
  expect(retry.text, `${what}: the first answer, byte for byte`).toBe(first.text)
}

const expectRefusedAsNewWork = (what: string, answer: Answer, output: string) => {
  expect(answer.error, `${what}: ${output}`).toBeUndefined()
  expect(answer.status, `${what}: ${answer.text}`).toBe(503)
  expect(answer.body, what).toMatchObject({ code: "overloaded", retryable: true, message: "the server is stopping and admits no new work" })
}

describe("keyed lifecycle requests retried during a graceful stop", () => {
  it("a retried create, end, delete, module upload and module removal gets its key's answer (a create the same session), and a new key is refused 503 overloaded having created, ended, deleted, stored and removed nothing; a keyed host registration (a retry too) and removal are refused so, having registered and removed no host", async () => {
    const s = (server = await startServer())
    const slow = (await call(s, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "slow", input: { ms: TOOL_MS } }] }, { text: "slow done" }] },
        tools: [{ name: "slow" }]
      }
    })).body.session_id as string

    // The first answers, each "lost" by its client: the retries below send the same requests again.
    const firstCreate = await call(s, "/v1/sessions", { json: CREATE, headers: keyed("create-1") })
    expect(firstCreate.status, firstCreate.text).toBe(201)
    const toEnd = await created(s)
    const firstEnd = await call(s, `/v1/sessions/${toEnd}/end`, { method: "POST", headers: keyed("end-1") })
    expect(firstEnd.status, firstEnd.text).toBe(200)
    const toDelete = await ended(s)
    const firstDelete = await call(s, `/v1/sessions/${toDelete}`, { method: "DELETE", headers: keyed("delete-1") })
    expect(firstDelete.status, firstDelete.text).toBe(204)
    const loop = await helloLoop()
    const firstUpload = await call(s, "/v1/agentloops", wasm(loop, "upload-1"))
    expect(firstUpload.status, firstUpload.text).toBe(201)
    const toRemove = await call(s, "/v1/agentloops", wasm(padded(loop, 1_000)))
    expect(toRemove.status, toRemove.text).toBe(201)
    const firstRemove = await call(s, `/v1/agentloops/${toRemove.body.id}`, { method: "DELETE", headers: keyed("remove-1") })
    expect(firstRemove.status, firstRemove.text).toBe(204)
    const firstRegister = await call(s, "/v1/hosts", { method: "POST", headers: keyed("register-1") })
    expect(firstRegister.status, firstRegister.text).toBe(201)
    // What a new key would act on.
    const idle = await created(s)
    const finished = await ended(s)
    const kept = await call(s, "/v1/agentloops", wasm(padded(loop, 2_000)))
    expect(kept.status, kept.text).toBe(201)
    const host = (await call(s, "/v1/hosts", { method: "POST" })).body as { host_id: string; token: string }
    const asHost = (key: string) => keyed(key, { authorization: `Bearer ${host.token}` })
    const hostsBefore = hostLines(s)
    const sessionsBefore = sessionDirs(s)
    const modulesBefore = (await call(s, "/v1/agentloops")).body.agentloops.map((m: { id: string }) => m.id).sort()

    const running = call(s, `/v1/sessions/${slow}/messages`, { json: { input: { message: "run the slow tool" } } })
    await eventually("the slow tool to start", async () => (s.toolCalls().length > 0 ? true : undefined), 60_000)
    s.signal("SIGTERM")
    await eventually("the server to stop admitting work", async () => (s.lines.some((l) => l.includes(STOPPING)) ? true : undefined), 60_000)

    const retries = {
      create: await call(s, "/v1/sessions", { json: CREATE, headers: keyed("create-1") }),
      end: await call(s, `/v1/sessions/${toEnd}/end`, { method: "POST", headers: keyed("end-1") }),
      delete: await call(s, `/v1/sessions/${toDelete}`, { method: "DELETE", headers: keyed("delete-1") }),
      upload: await call(s, "/v1/agentloops", wasm(loop, "upload-1")),
      remove: await call(s, `/v1/agentloops/${toRemove.body.id}`, { method: "DELETE", headers: keyed("remove-1") })
    }
    const fresh = {
      create: await call(s, "/v1/sessions", { json: CREATE, headers: keyed("create-new") }),
      end: await call(s, `/v1/sessions/${idle}/end`, { method: "POST", headers: keyed("end-new") }),
      delete: await call(s, `/v1/sessions/${finished}`, { method: "DELETE", headers: keyed("delete-new") }),
      upload: await call(s, "/v1/agentloops", wasm(padded(loop, 3_000), "upload-new")),
      remove: await call(s, `/v1/agentloops/${kept.body.id}`, { method: "DELETE", headers: keyed("remove-new") }),
      unkeyedCreate: await call(s, "/v1/sessions", { json: CREATE })
    }
    const hosts = {
      registrationRetry: await call(s, "/v1/hosts", { method: "POST", headers: keyed("register-1") }),
      registration: await call(s, "/v1/hosts", { method: "POST", headers: keyed("register-new") }),
      removal: await call(s, `/v1/hosts/${host.host_id}`, { method: "DELETE", headers: asHost("unregister-new") })
    }
    const ran = await running
    expect(await s.waitExit(60_000), s.output).toEqual({ code: 0, signal: null })

    expectAnswer("a retried create", retries.create, firstCreate, s.output)
    expect(retries.create.body.session_id, "the same session").toBe(firstCreate.body.session_id)
    expectAnswer("a retried end", retries.end, firstEnd, s.output)
    expectAnswer("a retried delete", retries.delete, firstDelete, s.output)
    expectAnswer("a retried upload", retries.upload, firstUpload, s.output)
    expectAnswer("a retried removal", retries.remove, firstRemove, s.output)
    for (const [what, answer] of Object.entries(fresh)) expectRefusedAsNewWork(`a new ${what}`, answer, s.output)
    for (const [what, answer] of Object.entries(hosts)) expectRefusedAsNewWork(`a host's ${what}`, answer, s.output)
    expect(hostLines(s), "no host registered or removed").toBe(hostsBefore)
    expect(ran.status, ran.text).toBe(200)
    expect(ran.body.turn).toMatchObject({ status: "ended", result: { text: "slow done" } })

    // Nothing was created, ended, deleted, stored or removed, and nothing kept under the new keys:
    // once the server is back, each runs.
    expect(sessionDirs(s), "no session created or deleted").toEqual(sessionsBefore)
    await s.start()
    expect((await call(s, "/v1/agentloops")).body.agentloops.map((m: { id: string }) => m.id).sort()).toEqual(modulesBefore)
    expect((await call(s, `/v1/sessions/${idle}`)).body).toMatchObject({ status: "idle" })
    expect((await call(s, `/v1/sessions/${finished}`)).status).toBe(200)
    const again = await call(s, "/v1/sessions", { json: CREATE, headers: keyed("create-1") })
    expectAnswer("a create's retry after the restart", again, firstCreate, s.output)
    const createNew = await call(s, "/v1/sessions", { json: CREATE, headers: keyed("create-new") })
    expect(createNew.status, createNew.text).toBe(201)
    expect(createNew.body.session_id).not.toBe(firstCreate.body.session_id)
    expect((await call(s, `/v1/sessions/${idle}/end`, { method: "POST", headers: keyed("end-new") })).status).toBe(200)
    expect((await call(s, `/v1/sessions/${finished}`, { method: "DELETE", headers: keyed("delete-new") })).status).toBe(204)
    expect((await call(s, "/v1/agentloops", wasm(padded(loop, 3_000), "upload-new"))).status).toBe(201)
    expect((await call(s, `/v1/agentloops/${kept.body.id}`, { method: "DELETE", headers: keyed("remove-new") })).status).toBe(204)
    // The host is still registered (its token still opens its removal), and a registration's key,
    // answered or not, holds nothing: each runs, another host.
    expect((await call(s, `/v1/hosts/${host.host_id}`, { method: "DELETE", headers: asHost("unregister-new") })).status).toBe(204)
    const registeredAgain = await call(s, "/v1/hosts", { method: "POST", headers: keyed("register-1") })
    expect(registeredAgain.status, registeredAgain.text).toBe(201)
    expect(registeredAgain.body.host_id).not.toBe(firstRegister.body.host_id)
    expect((await call(s, "/v1/hosts", { method: "POST", headers: keyed("register-new") })).status).toBe(201)
  }, 240_000)
})
