/**
 * One logical call, one Idempotency-Key, against a real server process: the Effect client mints a
 * call's key when its Effect is built, so running the same value again (`Effect.retry`) sends the
 * same key and the server runs the request once; every error of a keyed call carries the key
 * (`idempotencyKey`), in the Effect client and the Promise client, so a caller's own retry can
 * send it again; and a request the server says is still running under its key (409 `ambiguous`,
 * retryable: a dropped connection, not a crash) is waited for under that key, and its first
 * answer returned, instead of being reported at once.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { Brain, BrainClient, BrainError, type Fetch, NotFound } from "../../src/sdk/index.js"
import type { ServerProcess } from "../support/server.js"
import { asGlobalFetch, FaultyFetch, isPost } from "./faults.js"
import { history, jsonAnswer, type Sent, serverAndClient } from "./support.js"

const scripted = { model: { provider: "scripted" as const } }
/** A well-formed session id no session has. */
const NOBODY = "ses_00000000000000000000000000" as SessionId

describe("Idempotency-Keys across retries and on errors", () => {
  let server: ServerProcess
  let brain: Brain
  serverAndClient((started) => ({ server, brain } = started))

  /** Runs `effect` with the Effect client over `fetch`. */
  const run = <A, E>(effect: Effect.Effect<A, E, BrainClient>, fetch: Fetch) =>
    Effect.runPromise(Effect.provide(
      effect,
      Layer.merge(BrainClient.layerFetch({ baseUrl: server.baseUrl }), Layer.succeed(FetchHttpClient.Fetch, asGlobalFetch(fetch)))
    ))

  const sessionCount = async () => (await brain.sessions.list({ limit: 1000 })).sessions.length

  it("the Effect client mints a call's key when its Effect is built: Effect.retry of a create whose answers were lost sends the same key and creates one session", async () => {
    const faulty = new FaultyFetch().inject(isPost("/v1/sessions"), { kind: "lose-answer" }, 4)
    const before = await sessionCount()
    const errors: Array<unknown> = []
    const created = await run(
      Effect.gen(function*() {
        const client = yield* BrainClient
        return yield* client.sessions.create(scripted).pipe(
          Effect.tapError((e) => Effect.sync(() => errors.push(e))),
          Effect.retry({ times: 1 })
        )
      }),
      faulty.fetch
    )
    const creates = faulty.requests(isPost("/v1/sessions"))
    expect(creates).toHaveLength(5) // the client's own four sends, then the caller's retry
    const key = creates[0]!.headers["idempotency-key"]!
    expect(creates.map((s) => s.headers["idempotency-key"])).toEqual([key, key, key, key, key])
    expect(errors).toHaveLength(1)
    expect(errors[0]).toBeInstanceOf(BrainError)
    expect(errors[0]).toMatchObject({ code: "network_error", retryable: true, idempotencyKey: key })
    expect(created.session_id).toMatch(/^ses_/)
    expect(await sessionCount()).toBe(before + 1)
  })

  it("every error of a keyed Effect call carries the key it was sent with: a typed refusal too, and the caller's key when given", async () => {
    const faulty = new FaultyFetch()
    const [minted, given] = await run(
      Effect.gen(function*() {
        const client = yield* BrainClient
        const minted = yield* Effect.either(client.sessions.send(NOBODY, { message: "to nobody" }))
        // Caught by its tag, the refusal keeps its key, typed (a string).
        const given = yield* client.sessions.end(NOBODY, { idempotencyKey: "the-callers-key" }).pipe(
          Effect.map(() => "ended"),
          Effect.catchTag("NotFound", (e) => Effect.succeed(e.idempotencyKey satisfies string))
        )
        return [minted, given] as const
      }),
      faulty.fetch
    )
    const sends = faulty.requests(isPost("/messages"))
    expect(sends).toHaveLength(1)
    expect(Either.isLeft(minted) && minted.left).toBeInstanceOf(NotFound)
    expect(Either.isLeft(minted) && minted.left).toMatchObject({ _tag: "NotFound", idempotencyKey: sends[0]!.headers["idempotency-key"] })
    expect(given).toBe("the-callers-key")
  })

  it("the Promise client sends one key per call across its own retries and rejects with it; a retry under that key replays the turn instead of running it again", async () => {
    const faulty = new FaultyFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: faulty.fetch })
    try {
      const session = await client.sessions.create(scripted)
      faulty.inject(isPost("/messages"), { kind: "lose-answer" }, 4)
      const lost = await session.send("exactly once").catch((e) => e)
      const sends = faulty.requests(isPost("/messages"))
      expect(sends).toHaveLength(4)
      const key = sends[0]!.headers["idempotency-key"]!
      expect(new Set(sends.map((s) => s.headers["idempotency-key"]))).toEqual(new Set([key]))
      expect(lost).toBeInstanceOf(BrainError)
      expect(lost).toMatchObject({ code: "network_error", status: 0, retryable: true, idempotencyKey: key })

      const replayed = await session.send("exactly once", { idempotencyKey: lost.idempotencyKey })
      expect(replayed.turn).toMatchObject({ status: "ended", result: { text: "exactly once" } })
      const started = (await history(brain, session.id)).filter((e) => e.kind === "turn_started")
      expect(started.map((e) => e.sequence)).toEqual([replayed.turn.sequence])

      // A refusal of a keyed Promise call carries its key too.
      faulty.inject(isPost("/end"), { kind: "answer", answer: () => jsonAnswer(409, { code: "teardown_failed", message: "no", retryable: false }) })
      expect(await session.end({ idempotencyKey: "end-key" }).catch((e) => e)).toMatchObject({ code: "teardown_failed", idempotencyKey: "end-key" })
    } finally {
      await client.close()
    }
  })

  it("a structured send is one call with one key: a correction's lost answers reject with the send's key, and a retry under it replays every turn", async () => {
    const faulty = new FaultyFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: faulty.fetch })
    try {
      const session = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "not JSON" }, { text: "{\"n\": 1}" }] } })
      const isCorrection = (s: Sent) => isPost("/messages")(s) && (s.headers["idempotency-key"] ?? "").endsWith(":correction-1")
      faulty.inject(isCorrection, { kind: "lose-answer" }, 4)
      const output = Schema.Struct({ n: Schema.Number })
      const lost = await session.send("give n", { output }).catch((e) => e)
      const key = faulty.requests(isPost("/messages"))[0]!.headers["idempotency-key"]!
      expect(faulty.requests(isCorrection).map((s) => s.headers["idempotency-key"])).toEqual(Array(4).fill(`${key}:correction-1`))
      expect(lost).toMatchObject({ _tag: "BrainError", code: "network_error", idempotencyKey: key })

      const retried = await session.send("give n", { output, idempotencyKey: lost.idempotencyKey })
      expect(retried).toMatchObject({ output: { n: 1 }, corrections: 1 })
      expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(2)
    } finally {
      await client.close()
    }
  })

  it("a send whose connection dropped while its turn ran waits under the same key through the server's in-progress answers and resolves with the first request's outcome", async () => {
    const faulty = new FaultyFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: faulty.fetch })
    try {
      const session = await client.sessions.create({ model: { provider: "scripted", replies: [{ text: "slow answer", delay_ms: 1_500 }] } })
      // Dropped once the server has started its turn: the first request is the one that runs it.
      const turnStarted = async () => {
        while (!(await history(brain, session.id)).some((e) => e.kind === "turn_started")) await new Promise((resolve) => setTimeout(resolve, 10))
      }
      faulty.inject(isPost("/messages"), { kind: "drop-while-running", when: turnStarted })
      const outcome = await session.send("once, slowly")

      const sends = faulty.requests(isPost("/messages"))
      const key = sends[0]!.headers["idempotency-key"]
      expect(sends.length).toBeGreaterThanOrEqual(3) // the dropped one, an in-progress refusal at least, the replay
      for (const s of sends) {
        expect(s.headers["idempotency-key"]).toBe(key)
        expect(s.body).toBe(sends[0]!.body)
        expect(s.headers.prefer).toBeUndefined()
      }
      // It was told the request was still in progress, and waited on instead of rejecting.
      const answers = faulty.answered.filter((a) => isPost("/messages")(a.sent))
      expect(answers.length).toBe(sends.length - 1)
      const refusals = answers.slice(0, -1)
      expect(refusals.length).toBeGreaterThanOrEqual(1)
      for (const a of refusals) {
        expect(a.status).toBe(409)
        expect(JSON.parse((await a.text)!)).toMatchObject({ code: "ambiguous", retryable: true })
      }
      expect(answers.at(-1)!.status).toBe(200)
      const first = await faulty.answersBehind[0]!
      expect(first.status).toBe(200)
      expect(outcome).toEqual(JSON.parse(first.text))
      expect(outcome.turn).toMatchObject({ status: "ended", result: { text: "slow answer" } })
      expect((await history(brain, session.id)).filter((e) => e.kind === "turn_started")).toHaveLength(1)
    } finally {
      await client.close()
    }
  })

  it("waiting for a request still in progress stops with the call's signal", async () => {
    const faulty = new FaultyFetch()
    const client = new Brain({ baseUrl: server.baseUrl, fetch: faulty.fetch })
    try {
      const session = await client.sessions.create(scripted)
      const inProgress = () => jsonAnswer(409, { code: "ambiguous", message: "a request with this Idempotency-Key is still in progress", retryable: true })
      faulty.inject(isPost("/end"), { kind: "answer", answer: inProgress }, 1_000)
      const signal = AbortSignal.timeout(700)
      const stopped = await session.end({ signal }).catch((e) => e)
      expect(signal.aborted).toBe(true)
      expect(stopped).toBe(signal.reason)
      const ends = faulty.requests(isPost("/end"))
      expect(ends.length).toBeGreaterThanOrEqual(3)
      expect(new Set(ends.map((s) => s.headers["idempotency-key"])).size).toBe(1)
    } finally {
      await client.close()
    }
  })
})
