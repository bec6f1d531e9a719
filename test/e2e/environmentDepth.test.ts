/**
 * Every answer Brain parses from a lifecycle step is held to the 64 levels of nesting a tool's
 * output is (MAX_JSON_DEPTH), over the real routes, with the fake Environment in a process of its
 * own: a setup, detach or teardown answered `{"ok": v}` or `{"error": v}` with `v` nested 100,000
 * levels is a malformed answer (`environment_failed`, ambiguous, reason `bad_shape`), and an error
 * response's deep body is kept as text. Nothing deeper than the bound reaches the journal, Events
 * or an answer (docs/environments.md, "How Brain reads an answer").
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { nestingDepth } from "../../src/domain/JsonText.js"
import { MAX_JSON_DEPTH } from "../../src/domain/Limits.js"
import { type FakeProcess, startFake } from "../support/httpEnvironment.js"
import { ensureBuilt, request, type ServerProcess, startServer } from "../support/server.js"

interface Event {
  readonly kind: string
  readonly data: any
}

const eventsOf = async (server: ServerProcess, id: string): Promise<ReadonlyArray<Event>> => {
  const read = await request(server.baseUrl, `/v1/sessions/${id}/events`)
  expect(read.status, read.text).toBe(200)
  // Shallow as a whole: the page, each Event, its payload, its failure and details are a few levels.
  expect(nestingDepth(read.text)).toBeLessThan(MAX_JSON_DEPTH)
  return read.body.events as ReadonlyArray<Event>
}

describe("lifecycle answers nested past 64 levels, through a real server", () => {
  let fake: FakeProcess
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    // The first setup, detach and teardown misbehave; every later one is ok.
    fake = await startFake({
      setup: { behaviour: "deep", times: 1 },
      detach: { behaviour: "deep_error", times: 1 },
      teardown: { behaviour: "deep_refuse", times: 1 }
    })
    server = await startServer({ env: { BRAIN_ENVIRONMENTS: JSON.stringify({ boxes: { driver: "http", base_url: fake.url } }) } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
    fake?.child.kill()
  })

  it("a deep setup result fails the create (502 creation_failed, environment_failed bad_shape, ambiguous); a deep error body is kept as text; a deep {\"error\": v} to a detach is malformed too; nothing deep is journaled", async () => {
    const body = { model: { provider: "scripted", replies: [{ text: "hi" }] }, environments: [{ name: "box", driver: "http", binding: "boxes" }] }
    const failed = await request(server.baseUrl, "/v1/sessions", { json: body })
    expect(failed.status, failed.text).toBe(502)
    expect(nestingDepth(failed.text)).toBeLessThan(MAX_JSON_DEPTH)
    expect(failed.body).toMatchObject({
      code: "creation_failed",
      details: { environment: "box", failure: { code: "environment_failed", ambiguous: true, details: { environment: "box", reason: "bad_shape", status: 200 } } }
    })
    expect(failed.body.details.failure.message).toContain("nested deeper than 64 levels")
    const first = failed.body.details.session_id as string
    const firstEvents = await eventsOf(server, first)
    expect(firstEvents.find((e) => e.kind === "environment_setup_failed")?.data.failure).toMatchObject({ code: "environment_failed", ambiguous: true })
    expect(firstEvents.some((e) => e.kind === "environment_setup_ended")).toBe(false)
    // The teardown sent after the failed setup was refused (400) with a body 1,000 levels deep: text in its details.
    const teardown = firstEvents.find((e) => e.kind === "environment_teardown_failed")?.data.failure
    expect(teardown).toMatchObject({ code: "environment_failed", details: { status: 400 } })
    expect(typeof teardown.details.body).toBe("string")
    expect(teardown.details.body).toMatch(/^\[{1000}"deep"\]{1000}$/)

    // Later setups are ok: a session whose end's detach answers {"error": v} nested 100,000 levels.
    const created = await request(server.baseUrl, "/v1/sessions", { json: body })
    expect(created.status, created.text).toBe(201)
    const id = created.body.session_id as string
    const ended = await request(server.baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })
    expect(ended.status, ended.text).toBe(200)
    expect(nestingDepth(ended.text)).toBeLessThan(MAX_JSON_DEPTH)
    const events = await eventsOf(server, id)
    expect(events.find((e) => e.kind === "environment_detach_failed")?.data.failure).toMatchObject({
      code: "environment_failed",
      ambiguous: true,
      details: { reason: "bad_shape", status: 200 }
    })
    expect((await request(server.baseUrl, `/v1/sessions/${id}`, { method: "DELETE" })).status).toBe(204)
    expect((await request(server.baseUrl, `/v1/sessions/${first}`, { method: "DELETE" })).status).toBe(204)
    expect(fake.log().filter((l) => l.event === undefined).map((l) => [l.path, l.session_id === first ? "first" : "second"])).toEqual([
      ["/setup", "first"],
      ["/teardown", "first"],
      ["/setup", "second"],
      ["/detach", "second"],
      ["/teardown", "second"],
      ["/teardown", "first"]
    ])
  }, 60_000)
})
