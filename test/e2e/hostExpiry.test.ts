/**
 * Host registrations' idle expiry through a real server process with a short expiry
 * (BRAIN_HOST_IDLE_EXPIRY_SECS): a registration with no command stream and no session naming it
 * is removed, so its token opens nothing; a host whose stream stays open, and one a session that
 * is not deleted names, stand; a deleted session lets its host go. Across a `kill -9`, the idle
 * clock is kept: a host that came due while the server was down is gone as soon as it answers,
 * one connected when it died counts as connected until the restart.
 *
 * Whether a registration stands is probed without touching its clock: a result for a call that
 * was never sent answers 409 `not_in_flight` to a known host, 401 to an unknown one.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

const EXPIRY_SECS = 6
const NO_SESSION = `ses_${"0".repeat(26)}`

interface Registered {
  readonly host_id: string
  readonly token: string
}

describe("host registrations' idle expiry through a real server", () => {
  let server: ServerProcess
  const aborts: Array<AbortController> = []
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_HOST_IDLE_EXPIRY_SECS: String(EXPIRY_SECS) } })
  }, 120_000)
  afterAll(async () => {
    for (const a of aborts) a.abort()
    await server?.dispose()
  })

  const register = async (): Promise<Registered> => {
    const r = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body
  }

  /** Opens the host's command stream and reads its `ready`; the controller closes it. */
  const connect = async (host: Registered) => {
    const controller = new AbortController()
    aborts.push(controller)
    const response = await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), {
      headers: { authorization: `Bearer ${host.token}` },
      signal: controller.signal
    })
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    const first = new TextDecoder().decode((await reader.read()).value)
    expect(first).toContain("event: ready")
    // Keep reading in the background so that the stream stays drained.
    void (async () => {
      try {
        while (!(await reader.read()).done);
      } catch {
        // closed
      }
    })()
    return controller
  }

  /** Whether the registration stands: 409 (known, no such call) or 401 (unknown). */
  const stands = async (host: Registered) => {
    const r = await request(server.baseUrl, `/v1/hosts/${host.host_id}/results`, {
      json: { session_id: NO_SESSION, sequence: 1, ok: null },
      headers: { authorization: `Bearer ${host.token}` }
    })
    expect([401, 409], r.text).toContain(r.status)
    return r.status === 409
  }

  const records = () =>
    fs.readFileSync(path.join(server.dataDir, "hosts", "registrations.jsonl"), "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l))

  it("an idle registration nothing names expires; an open stream and a session not yet deleted keep theirs; a deleted session lets its host go", async () => {
    const idle = await register()
    const dropped = await register()
    const open = await register()
    const named = await register()
    await connect(open)
    ;(await connect(dropped)).abort()
    const created = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ text: "hi" }] },
        environments: [{ name: "app", driver: "host", host: named.host_id }],
        tools: [{ name: "lookup", description: "looks up", environment: "app" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const session = created.body.session_id as string

    await eventually("the idle registrations to expire", async () => ((await stands(idle)) || (await stands(dropped)) ? undefined : true), 3 * EXPIRY_SECS * 1000, 200)
    expect(await stands(open)).toBe(true)
    expect(await stands(named)).toBe(true)
    // Refused from the moment they were due; their removals are written by the next sweep.
    const removals = () => records().filter((r) => r.by === "expiry").map((r) => r.host_id).sort()
    await eventually("the expiries on file", async () => (removals().length === 2 ? true : undefined), 15_000, 100)
    expect(removals()).toEqual([idle.host_id, dropped.host_id].sort())
    // An expired host's token opens nothing, its stream included.
    const reopen = await fetch(server.url(`/v1/hosts/${idle.host_id}/commands`), { headers: { authorization: `Bearer ${idle.token}` } })
    expect(reopen.status).toBe(401)
    await reopen.body?.cancel()

    // Ended, the session still names its host; deleted, it lets it go (idle long past the expiry).
    expect((await request(server.baseUrl, `/v1/sessions/${session}/end`, { method: "POST" })).status).toBe(200)
    await sleep(1500)
    expect(await stands(named)).toBe(true)
    expect((await request(server.baseUrl, `/v1/sessions/${session}`, { method: "DELETE" })).status).toBe(204)
    await eventually("the deleted session's host to expire", async () => ((await stands(named)) ? undefined : true), 15_000, 200)
    expect(await stands(open)).toBe(true)
  }, 60_000)

  it("across a kill -9 the idle clock is kept: a host idle before the crash expires on time, one connected when the server died counts as connected until the restart", async () => {
    const before = await register()
    const connected = await register()
    await connect(connected)
    ;(await connect(before)).abort()
    // Its close is on file before the crash.
    await eventually("the close to be recorded", async () => (records().some((r) => r.host_id === before.host_id && r.idle_since_ms !== undefined) ? true : undefined))
    await sleep((EXPIRY_SECS - 1) * 1000)
    await server.kill()
    for (const a of aborts) a.abort()
    // Down long enough for `before` to come due meanwhile.
    await sleep(1500)
    await server.start()
    // `connected` counts as connected until the restart: it stands for the expiry after it (looked
    // at first, while the least of that expiry has passed on a loaded machine).
    expect(await stands(connected)).toBe(true)
    // `before` came due while the server was down: gone as soon as the server answers, before any
    // sweep; its stream is refused and no session can name it.
    expect(await stands(before)).toBe(false)
    const reopen = await fetch(server.url(`/v1/hosts/${before.host_id}/commands`), { headers: { authorization: `Bearer ${before.token}` } })
    expect(reopen.status).toBe(401)
    await reopen.body?.cancel()
    const naming = await request(server.baseUrl, "/v1/sessions", {
      json: { model: { provider: "scripted" }, environments: [{ name: "app", driver: "host", host: before.host_id }] }
    })
    expect(naming.status, naming.text).toBe(400)
    await eventually("the host connected at the crash to expire after the restart", async () => ((await stands(connected)) ? undefined : true), 3 * EXPIRY_SECS * 1000, 200)
  }, 60_000)
})
