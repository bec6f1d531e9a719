/**
 * The Effect client's error channel is exact: against a real server started with BRAIN_API_TOKEN,
 * each refusal arrives as the `Schema.TaggedError` its route declares (domain/Errors.ts), decoded
 * from the plain `{code, message, retryable, details?}` body by its code, so `catchTag` works from
 * the raw `HttpApiClient` over `BrainApi` and from `BrainClient`; errors sharing a status are told
 * apart by code. The union of each route is checked at compile time (`npm run typecheck`). The
 * Promise client, which wraps the Effect client, rejects with the same refusal as a BrainError.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpApiClient from "@effect/platform/HttpApiClient"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Either } from "effect"
import { Conflict, InvalidRequest, NotFound, SessionBusy, SessionEnded, Unauthorized } from "../../src/domain/Errors.js"
import type { SessionId } from "../../src/domain/Ids.js"
import { BrainApi } from "../../src/http/Api.js"
import type { IdempotencyRefusal } from "../../src/http/Idempotent.js"
import type { BrainApiClient, Refusals } from "../../src/sdk/BrainClient.js"
import type { HostEventError, RegisterError, ResultError } from "../../src/services/Hosts.js"
import type { CreateError, DeleteError, EndError, FollowError, TurnError } from "../../src/services/Sessions.js"
import type { SessionStorageError } from "../../src/domain/Errors.js"
import { type ApiError, Brain, BrainClient, BrainError } from "../../src/sdk/index.js"
import { ensureBuilt, type ServerProcess, startServer } from "../support/server.js"

const TOKEN = "sdk-typed-errors-token"
/** A well-formed session id no session has. */
const NOBODY = "ses_00000000000000000000000000" as SessionId

/** Compile-time: the refusals a route of the raw client declares, by tag, exactly (no more, no fewer). */
type Tags<Call extends (...args: any) => Effect.Effect<any, any, any>> = Refusals<Call> extends { readonly _tag: infer T } ? T : never
const exactly = <T extends string>(tags: { readonly [K in T]: true }) => Object.keys(tags).sort()
type Sessions = BrainApiClient["sessions"]
type Hosts = BrainApiClient["hosts"]

/**
 * Compile-time: every refusal `Service` can fail with is declared by the route that answers it.
 * A keyed route's work answers its refusals as recorded answers, not through the handler's error
 * channel, so the compiler checks these here rather than in the handlers.
 */
type Declares<Call extends (...args: any) => Effect.Effect<any, any, any>, Service> = [Service] extends [Refusals<Call>] ? true : false
const declared: ReadonlyArray<true> = [
  true as Declares<Sessions["create"], CreateError | IdempotencyRefusal>,
  true as Declares<Sessions["get"], SessionStorageError>,
  true as Declares<Sessions["send"], TurnError | IdempotencyRefusal>,
  true as Declares<Sessions["events"], FollowError>,
  true as Declares<Sessions["transcript"], SessionStorageError>,
  true as Declares<Sessions["cancel"], SessionStorageError | IdempotencyRefusal>,
  true as Declares<Sessions["end"], EndError | IdempotencyRefusal>,
  true as Declares<Sessions["delete"], DeleteError | IdempotencyRefusal>,
  true as Declares<Hosts["register"], RegisterError>,
  true as Declares<Hosts["results"], ResultError>,
  true as Declares<Hosts["events"], HostEventError>
]

describe("the Effect client's typed errors", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_API_TOKEN: TOKEN } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  /** The raw `HttpApiClient` of the contract, with `token` on every request. */
  const rawApi = (token = TOKEN) =>
    HttpApiClient.make(BrainApi, {
      baseUrl: server.baseUrl,
      transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(token))
    }).pipe(Effect.provide(FetchHttpClient.layer))

  const run = <A, E>(effect: Effect.Effect<A, E, BrainClient>) =>
    Effect.runPromise(Effect.provide(effect, BrainClient.layerFetch({ baseUrl: server.baseUrl, token: TOKEN })))

  it("each route declares every refusal its service method can fail with (checked by the compiler)", () => {
    expect(declared.every((d) => d)).toBe(true)
  })

  it("each route's error channel names exactly the refusals its contract declares (checked by the compiler)", () => {
    expect(exactly<Tags<Sessions["get"]>>({
      InvalidRequest: true,
      Unauthorized: true,
      NotFound: true,
      JournalCorrupt: true,
      JournalWriteFailed: true,
      Overloaded: true,
      Internal: true
    })).toHaveLength(7)
    expect(exactly<Tags<Sessions["send"]>>({
      InvalidRequest: true,
      Unauthorized: true,
      NotFound: true,
      Conflict: true,
      Ambiguous: true,
      SessionBusy: true,
      SessionEnded: true,
      PayloadTooLarge: true,
      UnsupportedMediaType: true,
      JournalCorrupt: true,
      JournalWriteFailed: true,
      AgentloopFailed: true,
      Overloaded: true,
      IdempotencyUnavailable: true,
      Internal: true
    })).toHaveLength(15)
    expect(exactly<Tags<Sessions["list"]>>({ InvalidRequest: true, Unauthorized: true, JournalWriteFailed: true, Overloaded: true, Internal: true })).toHaveLength(5)
    expect(exactly<Tags<BrainApiClient["health"]["live"]>>({ Internal: true })).toHaveLength(1)
  })

  it("a send while a turn runs fails with SessionBusy, caught by its tag from the raw HttpApiClient, retryable as on the wire", async () => {
    const caught = await Effect.runPromise(Effect.gen(function*() {
      const api = yield* rawApi()
      const { session_id } = yield* api.sessions.create({
        payload: { model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 3_000 }, { text: "next" }] } },
        headers: {}
      })
      yield* api.sessions.send({ path: { id: session_id }, payload: { input: { message: "first" } }, headers: { prefer: "respond-async" } })
      return yield* api.sessions.send({ path: { id: session_id }, payload: { input: { message: "second" } }, headers: {} }).pipe(
        Effect.as("sent" as const),
        Effect.catchTag("SessionBusy", (e) => Effect.succeed(e))
      )
    }))
    expect(caught).toBeInstanceOf(SessionBusy)
    expect(caught).toMatchObject({ _tag: "SessionBusy", code: "session_busy", retryable: true })
  })

  it("an unknown session is NotFound and a cursor past the end InvalidRequest with its details, each caught by tag", async () => {
    const result = await Effect.runPromise(Effect.gen(function*() {
      const api = yield* rawApi()
      const missing = yield* api.sessions.get({ path: { id: NOBODY } }).pipe(
        Effect.as("found" as const),
        Effect.catchTag("NotFound", (e) => Effect.succeed(e))
      )
      const { session_id } = yield* api.sessions.create({ payload: { model: { provider: "scripted" } }, headers: {} })
      const pastTheEnd = yield* api.sessions.events({ path: { id: session_id }, urlParams: { after: 1_000 } }).pipe(
        Effect.as("page" as const),
        Effect.catchTag("InvalidRequest", (e) => Effect.succeed(e))
      )
      return { missing, pastTheEnd }
    }))
    expect(result.missing).toBeInstanceOf(NotFound)
    expect(result.missing).toMatchObject({ code: "not_found", retryable: false })
    expect(result.pastTheEnd).toBeInstanceOf(InvalidRequest)
    expect(result.pastTheEnd).toMatchObject({ code: "invalid_request", details: { last_sequence: expect.any(Number) } })
  })

  it("a wrong token is Unauthorized on every group's routes, caught by its tag", async () => {
    const caught = await Effect.runPromise(Effect.gen(function*() {
      const api = yield* rawApi("wrong")
      const tagOf = (e: Unauthorized) => Effect.succeed(e._tag)
      return [
        yield* api.sessions.list({ urlParams: {} }).pipe(Effect.as("listed"), Effect.catchTag("Unauthorized", tagOf)),
        yield* api.agentloops.list().pipe(Effect.as("listed"), Effect.catchTag("Unauthorized", tagOf)),
        yield* api.hosts.register().pipe(Effect.as("registered"), Effect.catchTag("Unauthorized", tagOf))
      ]
    }))
    expect(caught).toEqual(["Unauthorized", "Unauthorized", "Unauthorized"])
  })

  it("409s are told apart by code: SessionEnded after the end, Conflict for a delete before it and for a reused Idempotency-Key", async () => {
    const result = await Effect.runPromise(Effect.gen(function*() {
      const api = yield* rawApi()
      const { session_id } = yield* api.sessions.create({ payload: { model: { provider: "scripted" } }, headers: {} })
      const id = { id: session_id }
      const early = yield* Effect.flip(api.sessions.delete({ path: id, headers: {} }))
      const key = { "idempotency-key": "typed-errors-reused" }
      yield* api.sessions.send({ path: id, payload: { input: { message: "one" } }, headers: key })
      const reused = yield* Effect.flip(api.sessions.send({ path: id, payload: { input: { message: "another" } }, headers: key }))
      yield* api.sessions.end({ path: id, headers: {} })
      const late = yield* Effect.flip(api.sessions.send({ path: id, payload: { input: { message: "after" } }, headers: {} }))
      return { early, reused, late }
    }))
    expect(result.early).toBeInstanceOf(Conflict)
    expect(result.reused).toBeInstanceOf(Conflict)
    expect(result.late).toBeInstanceOf(SessionEnded)
    expect([result.early._tag, result.reused._tag, result.late._tag]).toEqual(["Conflict", "Conflict", "SessionEnded"])
  })

  it("BrainClient fails with the same typed refusals: catchTags on SessionEnded and NotFound", async () => {
    const caught = await run(Effect.gen(function*() {
      const brain = yield* BrainClient
      const { session_id } = yield* brain.sessions.create({ model: { provider: "scripted" } })
      yield* brain.sessions.end(session_id)
      const ended = yield* brain.sessions.send(session_id, { message: "after the end" }).pipe(
        Effect.as("sent"),
        Effect.catchTags({ SessionEnded: (e) => Effect.succeed(`${e._tag} ${e.code}`), SessionBusy: () => Effect.succeed("busy") })
      )
      const missing = yield* Effect.either(brain.sessions.get(NOBODY))
      return { ended, missing }
    }))
    expect(caught.ended).toBe("SessionEnded session_ended")
    expect(Either.isLeft(caught.missing) && caught.missing.left).toBeInstanceOf(NotFound)
  })
  it("the Promise client rejects with the Effect client's refusal as a BrainError: the same code, message, retryable and details, with the contract's status", async () => {
    const brain = new Brain({ baseUrl: server.baseUrl, token: TOKEN })
    const stranger = new Brain({ baseUrl: server.baseUrl, token: "wrong" })
    try {
      const session = await brain.sessions.create({ model: { provider: "scripted" } })
      const id = session.id
      const fromPromise = async (call: () => Promise<unknown>) => call().then(() => "answered", (e) => e)
      const fromEffect = <A>(call: (client: typeof BrainClient.Service) => Effect.Effect<A, ApiError | BrainError>, token = TOKEN) =>
        Effect.runPromise(
          Effect.flip(Effect.flatMap(BrainClient, call)).pipe(Effect.provide(BrainClient.layerFetch({ baseUrl: server.baseUrl, token })))
        )
      const pairs: Array<readonly [unknown, ApiError | BrainError, number]> = [
        [await fromPromise(() => brain.sessions.get(NOBODY)), await fromEffect((c) => c.sessions.get(NOBODY)), 404],
        [await fromPromise(() => brain.sessions.get("not-a-session-id")), await fromEffect((c) => c.sessions.get("not-a-session-id")), 400],
        [await fromPromise(() => session.events(1_000).next()), await fromEffect((c) => c.sessions.events(id, { after: 1_000 })), 400],
        [await fromPromise(() => session.delete()), await fromEffect((c) => c.sessions.delete(id)), 409],
        [await fromPromise(() => stranger.sessions.list()), await fromEffect((c) => c.sessions.list(), "wrong"), 401]
      ]
      await session.end()
      pairs.push([await fromPromise(() => session.send("after the end")), await fromEffect((c) => c.sessions.send(id, { message: "after the end" })), 409])

      const fields = (e: { code: string; message: string; retryable: boolean; details?: unknown }) => ({
        code: e.code,
        message: e.message,
        retryable: e.retryable,
        details: e.details
      })
      for (const [promised, typed, status] of pairs) {
        expect(promised).toBeInstanceOf(BrainError)
        expect(typed).not.toBeInstanceOf(BrainError) // a refusal of the contract, by its tag
        expect(fields(promised as BrainError)).toEqual(fields(typed))
        expect((promised as BrainError).status).toBe(status)
      }
      expect(pairs.map(([, typed]) => typed._tag)).toEqual(["NotFound", "InvalidRequest", "InvalidRequest", "Conflict", "Unauthorized", "SessionEnded"])
    } finally {
      await brain.close()
      await stranger.close()
    }
  })
})
