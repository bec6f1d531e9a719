/**
 * The Effect client (HttpApiClient over src/http/Api.ts) against a real server started with
 * BRAIN_API_TOKEN: a create/send/get round trip with the token added to every request, and
 * refusals in its error channel as the route's typed errors (domain/Errors.ts), caught by tag.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { NotFound, SessionEnded } from "../../src/domain/Errors.js"
import { BrainClient } from "../../src/sdk/index.js"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

const TOKEN = "sdk-effect-token"

describe("the Effect client", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_API_TOKEN: TOKEN } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const run = <A, E>(effect: Effect.Effect<A, E, BrainClient>, token = TOKEN) =>
    Effect.runPromise(Effect.provide(effect, BrainClient.layerFetch({ baseUrl: server.baseUrl, token })))

  it("creates a session, sends a turn, submits another and reads them back over the HttpApi contract", async () => {
    const result = await run(Effect.gen(function*() {
      const brain = yield* BrainClient
      const created = yield* brain.sessions.create({ model: { provider: "scripted" } })
      const outcome = yield* brain.sessions.send(created.session_id, { message: "hello, Effect" })
      const receipt = yield* brain.sessions.submit(created.session_id, { message: "later" })
      const summary = yield* brain.sessions.get(created.session_id)
      const page = yield* brain.sessions.events(created.session_id, { after: 0 })
      const transcript = yield* brain.sessions.transcript(created.session_id)
      const list = yield* brain.sessions.list({ limit: 1000 })
      return { created, outcome, receipt, summary, page, transcript, list }
    }))
    expect(result.created.status).toBe("idle")
    expect(result.outcome.turn).toMatchObject({ status: "ended", result: { text: "hello, Effect" } })
    expect(result.receipt).toMatchObject({ session_id: result.created.session_id })
    expect(result.receipt.sequence).toBeGreaterThan(result.outcome.turn.sequence)
    expect(result.summary.session_id).toBe(result.created.session_id)
    expect(result.page.events.filter((e) => e.kind === "turn_started").map((e) => e.sequence)).toEqual([
      result.outcome.turn.sequence,
      result.receipt.sequence
    ])
    expect(result.transcript.messages[0]).toEqual({ role: "user", content: "hello, Effect" })
    expect(result.list.sessions.map((s) => s.session_id)).toContain(result.created.session_id)
  })

  it("ends and deletes a session; a later send fails with SessionEnded and a later read with NotFound, typed in the error channel", async () => {
    const gone = await run(Effect.gen(function*() {
      const brain = yield* BrainClient
      const { session_id } = yield* brain.sessions.create({ model: { provider: "scripted" } })
      const ended = yield* brain.sessions.end(session_id)
      expect(ended.status).toBe("ended")
      const refused = yield* Effect.either(brain.sessions.send(session_id, { message: "after the end" }))
      yield* brain.sessions.delete(session_id)
      const read = yield* Effect.either(brain.sessions.get(session_id))
      return { refused, read }
    }))
    expect(Either.isLeft(gone.refused) && gone.refused.left).toBeInstanceOf(SessionEnded)
    expect(Either.isLeft(gone.refused) && gone.refused.left).toMatchObject({ _tag: "SessionEnded", code: "session_ended", retryable: false })
    expect(Either.isLeft(gone.read) && gone.read.left).toBeInstanceOf(NotFound)
    expect(Either.isLeft(gone.read) && gone.read.left).toMatchObject({ code: "not_found", retryable: false })
  })

  it("a wrong token fails with Unauthorized, caught by its tag", async () => {
    const caught = await run(
      Effect.gen(function*() {
        const brain = yield* BrainClient
        return yield* brain.sessions.list()
      }).pipe(Effect.catchTag("Unauthorized", (e) => Effect.succeed(e))),
      "wrong"
    )
    expect(caught).toMatchObject({ _tag: "Unauthorized", code: "unauthorized", retryable: false })
  })
})
