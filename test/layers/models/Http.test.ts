/**
 * The streamed POST every provider makes (src/layers/models/Http.ts), against a fake server on
 * loopback: events arrive whole however the bytes are split, and each way a call can fail is
 * named by what is known afterwards (sent or not, ambiguous or not, the provider's error body).
 */
import { NodeHttpClient } from "@effect/platform-node"
import * as http from "node:http"
import * as https from "node:https"
import * as net from "node:net"
import * as zlib from "node:zlib"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Fiber, Layer, Redacted } from "effect"
import { vi } from "vitest"
import { Agent } from "undici"
import { MODEL_ERROR_BODY_MS, MODEL_RETRY_ADVICE_MAX_MS } from "../../../src/domain/Limits.js"
import { DONE_GRACE_MS, ERROR_BODY_BYTES, type SseEvent, type StreamedPost, streamedPost } from "../../../src/layers/models/Http.js"
import { ModelFailed } from "../../../src/services/Models.js"
import { LEAF_CERT, LEAF_KEY, SELF_SIGNED_CERT, SELF_SIGNED_KEY, TEST_CA_CERT } from "../../fixtures/tls.js"
import { FakeProvider, type Script, sse } from "../../support/fakeProvider.js"

const run = (
  url: string,
  limits = { stallMs: 2_000, maxOutputBytes: 0 },
  final?: string,
  dispatcher: Layer.Layer<NodeHttpClient.Dispatcher> = NodeHttpClient.dispatcherLayer
) =>
  Effect.gen(function*() {
    const events: Array<SseEvent> = []
    const result = yield* Effect.either(streamedPost({
      url,
      headers: { "content-type": "application/json" },
      body: { hello: "world" },
      limits,
      provider: "Fake",
      onEvent: (e) => {
        events.push(e)
        return e.data === final ? "done" : undefined
      },
      finish: () => Either.right(undefined)
    }))
    return { events, result }
  }).pipe(Effect.provide(dispatcher))

const withFake = <A>(script: Script, use: (fake: FakeProvider) => Promise<A>) =>
  Effect.promise(async () => {
    const fake = await FakeProvider.start(() => script)
    try {
      return await use(fake)
    } finally {
      await fake.close()
    }
  })

/** Waits until `holds`, or fails naming `what` when it has not after 10 s (a hang, not a timed check). */
const until = (what: string, holds: () => boolean) =>
  Effect.gen(function*() {
    while (!holds()) yield* Effect.sleep("5 millis")
  }).pipe(Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => new Error(`stuck: ${what}`) }))

const failureOf = (r: Either.Either<void, ModelFailed>) => (Either.isLeft(r) ? r.left : undefined)

/** One call with `over` in place of the defaults: its events and its result. */
const posted = (url: string, over: Partial<StreamedPost<void>> = {}) =>
  Effect.gen(function*() {
    const events: Array<SseEvent> = []
    const result = yield* Effect.either(streamedPost<void>({
      url,
      headers: { "content-type": "application/json" },
      body: { hello: "world" },
      limits: { stallMs: 2_000, maxOutputBytes: 0 },
      provider: "Fake",
      onEvent: (e) => {
        events.push(e)
        return e.data === "[DONE]" ? "done" : undefined
      },
      finish: () => Either.right(undefined),
      ...over
    }))
    return { events, result }
  }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))

/** A fake provider for the test's scope. */
const fakeServer = (script: Script) =>
  Effect.acquireRelease(Effect.promise(() => FakeProvider.start(() => script)), (fake) => Effect.promise(() => fake.close()))

/** `server` listening on loopback for the test's scope (its connections destroyed at the end); answers its port. */
const serving = (server: net.Server) =>
  Effect.acquireRelease(
    Effect.promise(() => {
      const sockets = new Set<net.Socket>()
      server.on("connection", (socket: net.Socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      return new Promise<{ readonly port: number; readonly sockets: Set<net.Socket> }>((resolve) =>
        server.listen(0, "127.0.0.1", () => resolve({ port: (server.address() as net.AddressInfo).port, sockets }))
      )
    }),
    ({ sockets }) =>
      Effect.promise(() => {
        for (const socket of sockets) socket.destroy()
        return new Promise<void>((resolve) => server.close(() => resolve()))
      })
  ).pipe(Effect.map(({ port }) => port))

/** `bytes` cut every `n` bytes, as separate writes. */
const inPieces = (bytes: Uint8Array, n: number): Script["steps"] => {
  const steps: Array<Script["steps"][number]> = []
  for (let i = 0; i < bytes.length; i += n) steps.push(bytes.subarray(i, i + n), { pauseMs: 1 })
  return steps
}

const ONE = "sk-SECRET-one-1111"
const TWO = "sk-SECRET-two-2222"
const secretHeaders = { authorization: Redacted.make(`Bearer ${ONE}`), "x-api-key": Redacted.make(TWO) }

describe("a streamed model request", () => {
  it.live("delivers every event whole, however its bytes are split, and sends the body once", () =>
    withFake({ steps: ["data: {\"a\"", ":1}\n", "\nevent: done\nda", "ta: [DONE]\n\n"] }, async (fake) => {
      const { events, result } = await Effect.runPromise(run(`${fake.url}/v1/x`))
      expect(Either.isRight(result)).toBe(true)
      expect(events).toEqual([{ event: undefined, data: "{\"a\":1}" }, { event: "done", data: "[DONE]" }])
      expect(fake.requests).toHaveLength(1)
      expect(fake.requests[0]!.body).toEqual({ hello: "world" })
    }))

  it.scopedLive("an informational response (103 Early Hints, one or several) before the final one is skipped: the final status answers the call, its stream whole, and the request is sent once", () =>
    Effect.gen(function*() {
      const answered = yield* fakeServer({ informational: [103, 103], steps: [sse({ n: 1 }), "data: [DONE]\n\n"] })
      const { events, result } = yield* run(`${answered.url}/v1/x`, { stallMs: 2_000, maxOutputBytes: 0 }, "[DONE]")
      expect(Either.isRight(result)).toBe(true)
      expect(events.map((e) => e.data)).toEqual(['{"n":1}', "[DONE]"])
      expect(answered.requests).toHaveLength(1)
      // The final status is the one judged: a 429 after a 103 is the 429, not the 103.
      const limited = yield* fakeServer({
        informational: [103],
        status: 429,
        headers: { "retry-after": "3", "content-type": "application/json" },
        steps: ['{"error":{"message":"slow down"}}']
      })
      const refused = yield* run(`${limited.url}/v1/x`)
      expect(failureOf(refused.result)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: false,
        details: { status: 429, retry_after_ms: 3000, body: { error: { message: "slow down" } } }
      })
      expect(limited.requests).toHaveLength(1)
    }))

  it.scopedLive("an unasked-for 100 Continue, which the HTTP client does not read past (it closes the connection), fails model_stream_broken, ambiguous: never as a refusal, and the request is sent once", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ informational: [100], steps: [sse({ n: 1 }), "data: [DONE]\n\n"] })
      const { result } = yield* run(`${fake.url}/v1/x`, { stallMs: 2_000, maxOutputBytes: 0 }, "[DONE]")
      expect(failureOf(result)).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
      expect(fake.requests).toHaveLength(1)
    }))

  it.live("the provider's final event ends the call at once, even from a server that keeps the stream open after it", () =>
    withFake({ steps: [sse({ n: 1 }), "data: [DONE]\n\n", { stall: true }] }, async (fake) => {
      const { events, result } = await Effect.runPromise(run(`${fake.url}/v1/x`, { stallMs: 5_000, maxOutputBytes: 0 }, "[DONE]"))
      expect(Either.isRight(result)).toBe(true)
      expect(events.map((e) => e.data)).toEqual(['{"n":1}', "[DONE]"])
    }))

  it.live("after the final event a response that ends keeps its connection for the next call; one left open is closed when DONE_GRACE_MS pass, not before", () =>
    Effect.gen(function*() {
      // One dispatcher for every call, as the server's Models layer has.
      const agent = new Agent()
      yield* Effect.addFinalizer(() => Effect.promise(() => agent.close()))
      const dispatcher = Layer.succeed(NodeHttpClient.Dispatcher, agent)
      const ending = yield* Effect.promise(() => FakeProvider.start(() => ({ steps: [sse({ n: 1 }), "data: [DONE]\n\n"] })))
      yield* Effect.addFinalizer(() => Effect.promise(() => ending.close()))
      /** The agent's connections to `fake` still busy with a request: its response not yet read to its end. */
      const busy = (fake: FakeProvider) => {
        const pool = (agent.stats as Record<string, { readonly connected: number; readonly free: number }>)[fake.url]
        return pool === undefined ? 0 : pool.connected - pool.free
      }
      for (let i = 0; i < 3; i++) {
        const { result } = yield* run(`${ending.url}/v1/x`, { stallMs: 5_000, maxOutputBytes: 0 }, "[DONE]", dispatcher)
        expect(Either.isRight(result)).toBe(true)
        // The answer comes at the final event, the response's end a moment later (as between a turn's model calls: its commits).
        yield* until("the response read to its end", () => busy(ending) === 0)
      }
      expect(ending.requests).toHaveLength(3)
      expect(ending.connections).toBe(1)

      // The grace's timer is held here, not armed, and fired by the test: the connection waits for it, whatever the clock says.
      const held: Array<() => void> = []
      const original = globalThis.setTimeout as unknown as (...args: Array<unknown>) => unknown
      const set = vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => void, ms?: number, ...rest: Array<unknown>) => {
        if (ms !== DONE_GRACE_MS) return original(fn, ms, ...rest)
        held.push(fn)
        return { unref: () => {}, ref: () => {}, refresh: () => {}, hasRef: () => false }
      }) as unknown as typeof setTimeout)
      yield* Effect.addFinalizer(() => Effect.sync(() => set.mockRestore()))
      const open = yield* Effect.promise(() => FakeProvider.start(() => ({ steps: [sse({ n: 1 }), "data: [DONE]\n\n", { stall: true }] })))
      yield* Effect.addFinalizer(() => Effect.promise(() => open.close()))
      const { result } = yield* run(`${open.url}/v1/x`, { stallMs: 60_000, maxOutputBytes: 0 }, "[DONE]", dispatcher)
      expect(Either.isRight(result)).toBe(true)
      expect(held).toHaveLength(1)
      set.mockRestore()
      // The grace not over: the response is still read, its connection open.
      yield* Effect.sleep("50 millis")
      expect(open.openConnections).toBe(1)
      expect(busy(open)).toBe(1)
      held[0]!()
      yield* until("the connection closed", () => open.openConnections === 0)
    }).pipe(Effect.scoped))

  it.live("connection refused is model_unreachable, not ambiguous: nothing was sent", () =>
    Effect.gen(function*() {
      // A port nobody listens on: taken, then released.
      const port = yield* Effect.promise(() =>
        new Promise<number>((resolve) => {
          const s = net.createServer().listen(0, "127.0.0.1", () => {
            const p = (s.address() as net.AddressInfo).port
            s.close(() => resolve(p))
          })
        })
      )
      const { result } = yield* run(`http://127.0.0.1:${port}/v1/x`)
      expect(failureOf(result)).toMatchObject({ code: "model_unreachable", ambiguous: false, retryable: true })
    }))

  it.live("429 is model_rate_limited with retry-after as advice; 400 model_rejected with the provider's body; 500 model_unavailable, ambiguous", () =>
    Effect.gen(function*() {
      const limited = yield* withFake(
        { status: 429, headers: { "retry-after": "7", "content-type": "application/json" }, steps: ['{"error":{"message":"slow down"}}'] },
        (fake) => Effect.runPromise(run(`${fake.url}/v1/x`))
      )
      expect(failureOf(limited.result)).toMatchObject({
        code: "model_rate_limited",
        retryable: true,
        ambiguous: false,
        details: { status: 429, retry_after_ms: 7000, body: { error: { message: "slow down" } } }
      })
      const rejected = yield* withFake(
        { status: 400, headers: { "content-type": "application/json" }, steps: ['{"error":{"type":"invalid_request_error"}}'] },
        (fake) => Effect.runPromise(run(`${fake.url}/v1/x`))
      )
      expect(failureOf(rejected.result)).toMatchObject({
        code: "model_rejected",
        ambiguous: false,
        retryable: false,
        details: { status: 400, body: { error: { type: "invalid_request_error" } } }
      })
      const down = yield* withFake({ status: 503, steps: ["overloaded"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
      expect(failureOf(down.result)).toMatchObject({ code: "model_unavailable", ambiguous: true, details: { status: 503, body: "overloaded" } })
    }))

  it.live("a 429 whose body says the quota or a spend limit is spent is model_rate_limited but not retryable (waiting does not fix it) and not ambiguous; a plain 429 stays retryable", () =>
    Effect.gen(function*() {
      const status429 = (body: unknown) =>
        withFake(
          { status: 429, headers: { "content-type": "application/json" }, steps: [JSON.stringify(body)] },
          (fake) => Effect.runPromise(run(`${fake.url}/v1/x`))
        ).pipe(Effect.map(({ result }) => failureOf(result)))
      const spent = [
        // OpenAI: the error type, and the codes naming the cause.
        { error: { message: "You exceeded your current quota", type: "insufficient_quota", param: null, code: "insufficient_quota" } },
        { error: { message: "Your credit balance is too low", type: "insufficient_quota", param: null, code: "credit_balance_exhausted" } },
        { error: { message: "Project spend limit reached", type: "insufficient_quota", param: null, code: "project_spend_limit_exceeded" } },
        // Anthropic: a rate_limit_error whose details name the spend limit.
        {
          type: "error",
          error: { type: "rate_limit_error", message: "Spend limit reached", details: { error_code: "enforced_spend_limit_reached" } },
          request_id: "req_1"
        }
      ]
      for (const body of spent) {
        expect(yield* status429(body)).toMatchObject({ code: "model_rate_limited", retryable: false, ambiguous: false, details: { status: 429, body } })
      }
      const plain = { error: { message: "Rate limit reached", type: "requests", param: null, code: "rate_limit_exceeded" } }
      expect(yield* status429(plain)).toMatchObject({ code: "model_rate_limited", retryable: true, ambiguous: false })
    }))

  it.live("408 is model_timeout, ambiguous (the provider had the request) and retryable; 409 is model_rejected, retryable and not ambiguous", () =>
    Effect.gen(function*() {
      const timedOut = yield* withFake({ status: 408, steps: ["request timeout"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
      expect(failureOf(timedOut.result)).toMatchObject({ code: "model_timeout", ambiguous: true, retryable: true, details: { status: 408 } })
      const conflict = yield* withFake({ status: 409, steps: ["lock timeout"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
      expect(failureOf(conflict.result)).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: true, details: { status: 409 } })
    }))

  it.live("x-should-retry is the provider's word: true or false overrides the status's retryable, and never changes ambiguous", () =>
    Effect.gen(function*() {
      const answered = (status: number, shouldRetry: string) =>
        withFake({ status, headers: { "x-should-retry": shouldRetry }, steps: ["{}"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
          .pipe(Effect.map(({ result }) => failureOf(result)))
      expect(yield* answered(400, "true")).toMatchObject({ code: "model_rejected", retryable: true, ambiguous: false })
      expect(yield* answered(429, "false")).toMatchObject({ code: "model_rate_limited", retryable: false, ambiguous: false })
      expect(yield* answered(500, "false")).toMatchObject({ code: "model_unavailable", retryable: false, ambiguous: true })
      expect(yield* answered(500, "maybe")).toMatchObject({ code: "model_unavailable", retryable: true, ambiguous: true })
    }))

  it.live("retry advice goes into details.retry_after_ms on any error status that carries it (529, 503), retry-after-ms read before retry-after", () =>
    Effect.gen(function*() {
      const answered = (status: number, headers: Record<string, string>) =>
        withFake({ status, headers, steps: ["{}"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
          .pipe(Effect.map(({ result }) => failureOf(result)))
      expect(yield* answered(529, { "retry-after": "30" })).toMatchObject({ code: "model_unavailable", details: { status: 529, retry_after_ms: 30_000 } })
      expect(yield* answered(503, { "retry-after-ms": "1500", "retry-after": "2" })).toMatchObject({ details: { status: 503, retry_after_ms: 1500 } })
      expect(yield* answered(429, { "retry-after-ms": "250.4", "retry-after": "9" })).toMatchObject({ details: { retry_after_ms: 250 } })
      // An unusable retry-after-ms falls back to retry-after.
      expect(yield* answered(429, { "retry-after-ms": "soon", "retry-after": "4" })).toMatchObject({ details: { retry_after_ms: 4000 } })
      const none = yield* answered(500, {})
      expect(none?.details).not.toHaveProperty("retry_after_ms")
    }))

  it.live("retry advice is recorded as at most MODEL_RETRY_ADVICE_MAX_MS, a whole number of milliseconds a timer can wait: a huge retry-after, retry-after-ms or a far date is clamped to it", () =>
    Effect.gen(function*() {
      const advised = (headers: Record<string, string>) =>
        withFake({ status: 503, headers, steps: ["{}"] }, (fake) => Effect.runPromise(run(`${fake.url}/v1/x`)))
          .pipe(Effect.map(({ result }) => (failureOf(result)?.details as { retry_after_ms?: number }).retry_after_ms))
      expect(MODEL_RETRY_ADVICE_MAX_MS).toBe(2 ** 31 - 1)
      expect(yield* advised({ "retry-after": "99999999999999999999" })).toBe(MODEL_RETRY_ADVICE_MAX_MS)
      expect(yield* advised({ "retry-after-ms": "99999999999999999999" })).toBe(MODEL_RETRY_ADVICE_MAX_MS)
      expect(yield* advised({ "retry-after": "Fri, 31 Dec 9999 23:59:59 GMT" })).toBe(MODEL_RETRY_ADVICE_MAX_MS)
      // Advice within the bound is kept as given.
      expect(yield* advised({ "retry-after": "86400" })).toBe(86_400_000)
    }))

  it.live("a connection cut mid-stream is model_stream_broken and ambiguous; what came before it was delivered", () =>
    withFake({ steps: [sse({ n: 1 }), { pauseMs: 20 }, "data: {\"n\":", { cut: true }] }, async (fake) => {
      const { events, result } = await Effect.runPromise(run(`${fake.url}/v1/x`))
      expect(events.map((e) => e.data)).toEqual(['{"n":1}'])
      expect(failureOf(result)).toMatchObject({ code: "model_stream_broken", ambiguous: true })
    }))

  it.live("a stall past the limit, before the headers or between chunks, is model_timeout and ambiguous", () =>
    Effect.gen(function*() {
      const midway = yield* withFake(
        { steps: [sse({ n: 1 }), { stall: true }] },
        (fake) => Effect.runPromise(run(`${fake.url}/v1/x`, { stallMs: 300, maxOutputBytes: 0 }))
      )
      expect(midway.events).toHaveLength(1)
      expect(failureOf(midway.result)).toMatchObject({ code: "model_timeout", ambiguous: true })
      const fake = yield* Effect.promise(() => FakeProvider.start(() => new Promise<Script>(() => undefined)))
      const silent = yield* run(`${fake.url}/v1/x`, { stallMs: 300, maxOutputBytes: 0 })
      yield* Effect.promise(() => fake.close())
      expect(failureOf(silent.result)).toMatchObject({ code: "model_timeout", ambiguous: true })
    }))

  it.live("a response past the output limit is model_output_limit and stops reading", () =>
    withFake({ steps: Array.from({ length: 50 }, (_, i) => sse({ i, pad: "x".repeat(100) })) }, async (fake) => {
      const { events, result } = await Effect.runPromise(run(`${fake.url}/v1/x`, { stallMs: 2_000, maxOutputBytes: 1_000 }))
      expect(events.length).toBeLessThan(50)
      expect(failureOf(result)).toMatchObject({ code: "model_output_limit", ambiguous: true, retryable: false })
    }))
  it.scopedLive("the call's secrets never come back in a failure: a secret header's value, and an Authorization header's credentials without their scheme, are redacted from an error body (JSON, text, or cut at its bound inside a key), an event's failure and the fold's", () =>
    Effect.gen(function*() {
      const answered = (script: Script, over: Partial<StreamedPost<void>> = {}) =>
        Effect.gen(function*() {
          const fake = yield* fakeServer(script)
          const { result } = yield* posted(`${fake.url}/v1/x`, { secretHeaders, ...over })
          // They were sent.
          expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${ONE}`)
          expect(fake.requests[0]!.headers["x-api-key"]).toBe(TWO)
          return failureOf(result)!
        })
      const json = yield* answered({
        status: 401,
        headers: { "content-type": "application/json" },
        steps: [JSON.stringify({ error: { message: `Incorrect API key provided: ${ONE}`, [TWO]: `Bearer ${ONE}` } })]
      })
      expect(json).toMatchObject({
        code: "model_rejected",
        details: { status: 401, body: { error: { message: "Incorrect API key provided: <redacted>", "<redacted>": "<redacted>" } } }
      })
      const text = yield* answered({ status: 401, steps: [`bad key ${TWO}`] })
      expect(text.details).toMatchObject({ status: 401, body: "bad key <redacted>" })
      // The bound cuts the body 6 characters into the key: those go too.
      const cut = yield* answered({ status: 401, steps: ["x".repeat(ERROR_BODY_BYTES - 6) + ONE + " and more"] })
      expect((cut.details as { body: string }).body.endsWith("x<redacted>")).toBe(true)
      const inEvent = yield* answered({ steps: [sse({ n: 1 })] }, {
        onEvent: () =>
          new ModelFailed({ code: "model_rejected", message: `it said ${TWO}`, ambiguous: false, retryable: false, details: { error: { message: `key ${ONE}` } } })
      })
      expect(inEvent).toMatchObject({ message: "it said <redacted>", details: { error: { message: "key <redacted>" } } })
      const inFinish = yield* answered({ steps: [sse({ n: 1 })] }, {
        finish: () => Either.left(new ModelFailed({ code: "model_stream_broken", message: `ended ${ONE}`, ambiguous: true, retryable: true, details: [TWO] }))
      })
      expect(inFinish).toMatchObject({ message: "ended <redacted>", details: ["<redacted>"] })
      for (const failure of [json, text, cut, inEvent, inFinish]) expect(JSON.stringify(failure)).not.toContain("sk-SEC")
    }))

  it.scopedLive("the call's secrets never come back in an answer either: every string of the provider's result (text, a tool call's input, its member names) has them redacted; numbers are kept", () =>
    Effect.gen(function*() {
      const fake = yield* fakeServer({ steps: [sse({ n: 1 }), "data: [DONE]\n\n"] })
      const answer = yield* streamedPost({
        url: `${fake.url}/v1/x`,
        headers: { "content-type": "application/json" },
        secretHeaders,
        body: {},
        limits: { stallMs: 2_000, maxOutputBytes: 0 },
        provider: "Fake",
        onEvent: (e) => (e.data === "[DONE]" ? "done" : undefined),
        finish: () => Either.right({ text: `your header was Bearer ${ONE}`, tool_calls: [{ input: { [TWO]: `k ${ONE}`, n: 7 } }] })
      }).pipe(Effect.provide(NodeHttpClient.dispatcherLayer))
      expect(answer).toEqual({ text: "your header was <redacted>", tool_calls: [{ input: { "<redacted>": "k <redacted>", n: 7 } }] })
    }))

  it.scopedLive("an error status whose body then stalls fails as its status says, with what of the body came: a 429 stays model_rate_limited with its retry advice, a 400 model_rejected, neither ambiguous", () =>
    Effect.gen(function*() {
      const limits = { stallMs: 300, maxOutputBytes: 0 }
      const limited = yield* fakeServer({ status: 429, headers: { "retry-after": "5", "content-length": "100" }, steps: ["{\"error\":{\"mess", { stall: true }] })
      expect(failureOf((yield* posted(`${limited.url}/v1/x`, { limits })).result)).toMatchObject({
        code: "model_rate_limited",
        ambiguous: false,
        retryable: true,
        details: { status: 429, retry_after_ms: 5_000, body: "{\"error\":{\"mess" }
      })
      const refused = yield* fakeServer({ status: 400, headers: { "content-length": "100" }, steps: ["invalid", { stall: true }] })
      expect(failureOf((yield* posted(`${refused.url}/v1/x`, { limits })).result)).toMatchObject({
        code: "model_rejected",
        ambiguous: false,
        retryable: false,
        details: { status: 400, body: "invalid" }
      })
    }))

  it.scopedLive("an error status whose body drips on (never stalling, never reaching its byte bound) fails as its status says once MODEL_ERROR_BODY_MS pass, with what of the body came: a 500 model_unavailable, ambiguous, retryable, its connection closed", () =>
    Effect.gen(function*() {
      // The bound's timer is held here, not armed, and fired by the test once some of the body has come, whatever the clock says.
      const held: Array<() => void> = []
      const original = globalThis.setTimeout as unknown as (...args: Array<unknown>) => unknown
      const set = vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => void, ms?: number, ...rest: Array<unknown>) => {
        if (ms !== MODEL_ERROR_BODY_MS) return original(fn, ms, ...rest)
        held.push(fn)
        return { unref: () => {}, ref: () => {}, refresh: () => {}, hasRef: () => false }
      }) as unknown as typeof setTimeout)
      yield* Effect.addFinalizer(() => Effect.sync(() => set.mockRestore()))
      const head = '{"error":{"message":"'
      let dripped = 0
      let open = 0
      const port = yield* serving(http.createServer((_req, res) => {
        open++
        res.on("close", () => open--)
        res.writeHead(500, { "content-type": "application/json" })
        res.write(head)
        original(function next() {
          if (res.destroyed) return
          res.write("d")
          dripped++
          original(next, 10)
        }, 10)
      }))
      const call = yield* Effect.fork(posted(`http://127.0.0.1:${port}/v1/x`, { limits: { stallMs: 60_000, maxOutputBytes: 0 } }))
      yield* until("the error body's bound armed and some of the body dripped", () => held.length === 1 && dripped >= 5)
      set.mockRestore()
      held[0]!()
      const failure = failureOf((yield* Fiber.join(call)).result)
      expect(failure).toMatchObject({ code: "model_unavailable", ambiguous: true, retryable: true, details: { status: 500 } })
      expect(failure?.message).toContain(`${MODEL_ERROR_BODY_MS} ms`)
      const body = (failure?.details as { body: string }).body
      expect(body.startsWith(head)).toBe(true)
      expect(body).toMatch(/^\{"error":\{"message":"d*$/)
      yield* until("the connection closed", () => open === 0)
    }))

  it.scopedLive("a 2xx that is not an event stream (a JSON completion, a gateway's error, a page) is model_bad_response, ambiguous and not retryable, with its Content-Type and body (bounded) in details; its bytes are never read as events", () =>
    Effect.gen(function*() {
      const completion = { object: "chat.completion", choices: [{ message: { role: "assistant", content: "data: [DONE]\n\n" } }] }
      const json = yield* fakeServer({ headers: { "content-type": "application/json" }, steps: [JSON.stringify(completion)] })
      const answered = yield* posted(`${json.url}/v1/x`)
      expect(answered.events).toEqual([])
      expect(failureOf(answered.result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: false,
        details: { status: 200, content_type: "application/json", body: completion }
      })
      const page = yield* fakeServer({ headers: { "content-type": "text/html" }, steps: ["<p>", "y".repeat(ERROR_BODY_BYTES * 2)] })
      const long = failureOf((yield* posted(`${page.url}/v1/x`)).result)
      expect(long).toMatchObject({ code: "model_bad_response", details: { status: 200, content_type: "text/html" } })
      expect((long?.details as { body: string }).body).toHaveLength(ERROR_BODY_BYTES)
      // One that stalls fails the same way, with what came.
      const stalled = yield* fakeServer({ headers: { "content-type": "application/json", "content-length": "100" }, steps: ["{\"error\"", { stall: true }] })
      expect(failureOf((yield* posted(`${stalled.url}/v1/x`, { limits: { stallMs: 300, maxOutputBytes: 0 } })).result)).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        details: { status: 200, body: "{\"error\"" }
      })
    }))

  it.scopedLive("an event stream is known by its media type whatever its case and parameters, and a 2xx without a Content-Type is read as one", () =>
    Effect.gen(function*() {
      const steps = [sse({ n: 1 }), "data: [DONE]\n\n"]
      for (const type of ["text/event-stream; charset=utf-8", "Text/Event-Stream"]) {
        const fake = yield* fakeServer({ headers: { "content-type": type }, steps })
        const { events, result } = yield* posted(`${fake.url}/v1/x`)
        expect(Either.isRight(result)).toBe(true)
        expect(events.map((e) => e.data)).toEqual(["{\"n\":1}", "[DONE]"])
      }
      const port = yield* serving(http.createServer((_req, res) => {
        res.writeHead(200)
        res.end(steps.join(""))
      }))
      const untyped = yield* posted(`http://127.0.0.1:${port}/v1/x`)
      expect(Either.isRight(untyped.result)).toBe(true)
      expect(untyped.events).toHaveLength(2)
    }))

  it.scopedLive("a 3xx is model_rejected, neither ambiguous nor retryable: a redirect is never followed, its Location kept in details", () =>
    Effect.gen(function*() {
      for (const status of [301, 307, 308]) {
        const fake = yield* fakeServer({ status, headers: { location: "https://elsewhere.example/v1/x" }, steps: [] })
        const failure = failureOf((yield* posted(`${fake.url}/v1/x`)).result)
        expect(failure).toMatchObject({ code: "model_rejected", ambiguous: false, retryable: false, details: { status, location: "https://elsewhere.example/v1/x" } })
        expect(failure?.message).toContain("redirect")
        expect(fake.requests).toHaveLength(1)
      }
    }))

  it.scopedLive("a TLS handshake that fails is model_unreachable, not ambiguous, whatever its error: no HTTP byte left (a plain-HTTP server, a reset mid-handshake, a self-signed certificate, one of an unknown issuer with or without its chain)", () =>
    Effect.gen(function*() {
      const plain = yield* fakeServer({ steps: [] })
      let seen = 0
      const counting = (_req: http.IncomingMessage, res: http.ServerResponse) => {
        seen++
        res.end()
      }
      const targets = {
        plain: plain.url.replace("http:", "https:"),
        reset: `https://127.0.0.1:${yield* serving(net.createServer((socket) => socket.destroy()))}`,
        selfSigned: `https://127.0.0.1:${yield* serving(https.createServer({ key: SELF_SIGNED_KEY, cert: SELF_SIGNED_CERT }, counting))}`,
        unknownIssuer: `https://127.0.0.1:${yield* serving(https.createServer({ key: LEAF_KEY, cert: LEAF_CERT }, counting))}`,
        untrustedChain: `https://127.0.0.1:${yield* serving(https.createServer({ key: LEAF_KEY, cert: `${LEAF_CERT}\n${TEST_CA_CERT}` }, counting))}`
      }
      for (const [name, url] of Object.entries(targets)) {
        const failure = failureOf((yield* posted(`${url}/v1/x`)).result)
        expect({ name, failure }).toMatchObject({ name, failure: { code: "model_unreachable", ambiguous: false, retryable: true } })
      }
      expect(plain.requests).toHaveLength(0)
      expect(seen).toBe(0)
    }))

  it.scopedLive("a stall before the connection is made (a TLS handshake that never ends) is model_unreachable, not ambiguous: nothing was sent", () =>
    Effect.gen(function*() {
      const port = yield* serving(net.createServer(() => undefined))
      const failure = failureOf((yield* posted(`https://127.0.0.1:${port}/v1/x`, { limits: { stallMs: 300, maxOutputBytes: 0 } })).result)
      expect(failure).toMatchObject({ code: "model_unreachable", ambiguous: false, retryable: true })
    }))

  it.scopedLive("a connection lost once the request was on it (a server that reads the request and closes) stays model_stream_broken, ambiguous", () =>
    Effect.gen(function*() {
      let read = 0
      const port = yield* serving(net.createServer((socket) =>
        socket.on("data", () => {
          read++
          socket.destroy()
        })
      ))
      const failure = failureOf((yield* posted(`http://127.0.0.1:${port}/v1/x`)).result)
      expect(failure).toMatchObject({ code: "model_stream_broken", ambiguous: true, retryable: true })
      expect(read).toBeGreaterThan(0)
    }))

  it.scopedLive("the request asks for no content coding (accept-encoding: identity); a stream encoded anyway with gzip, deflate or br is decoded, however its bytes are split", () =>
    Effect.gen(function*() {
      const text = Buffer.from(sse({ n: 1 }) + sse({ n: 2 }) + "data: [DONE]\n\n")
      const codings = [["gzip", zlib.gzipSync], ["x-gzip", zlib.gzipSync], ["deflate", zlib.deflateSync], ["br", zlib.brotliCompressSync]] as const
      for (const [coding, encode] of codings) {
        const fake = yield* fakeServer({ headers: { "content-encoding": coding }, steps: inPieces(encode(text), 5) })
        const { events, result } = yield* posted(`${fake.url}/v1/x`)
        expect(fake.requests[0]!.headers["accept-encoding"]).toBe("identity")
        expect({ coding, ok: Either.isRight(result) }).toEqual({ coding, ok: true })
        expect(events.map((e) => e.data)).toEqual(["{\"n\":1}", "{\"n\":2}", "[DONE]"])
      }
    }))

  it.scopedLive("an encoded error body is decoded into details.body, to its bound; a coding Brain cannot decode fails clearly (the status's own failure without a body, model_bad_response for a 2xx); a corrupt encoded stream is model_bad_response, ambiguous", () =>
    Effect.gen(function*() {
      const failing = (script: Script) => fakeServer(script).pipe(Effect.flatMap((fake) => posted(`${fake.url}/v1/x`)), Effect.map(({ result }) => failureOf(result)))
      const body = { error: { message: "slow down" } }
      expect(yield* failing({ status: 429, headers: { "content-encoding": "gzip" }, steps: [zlib.gzipSync(JSON.stringify(body))] })).toMatchObject({
        code: "model_rate_limited",
        details: { status: 429, body }
      })
      const inflated = yield* failing({ status: 500, headers: { "content-encoding": "gzip" }, steps: [zlib.gzipSync("z".repeat(4 * 1024 * 1024))] })
      expect((inflated?.details as { body: string }).body).toBe("z".repeat(ERROR_BODY_BYTES))
      const unknownError = yield* failing({ status: 429, headers: { "content-encoding": "zstd" }, steps: ["\u0028\u00b5"] })
      expect(unknownError).toMatchObject({ code: "model_rate_limited", ambiguous: false, details: { status: 429, content_encoding: "zstd" } })
      expect(unknownError?.details).not.toHaveProperty("body")
      expect(yield* failing({ headers: { "content-encoding": "zstd" }, steps: ["\u0028\u00b5"] })).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        retryable: false,
        details: { status: 200, content_encoding: "zstd" }
      })
      const gzipped = zlib.gzipSync(sse({ n: 1 }))
      const corrupt = Buffer.concat([gzipped.subarray(0, 10), Buffer.from("not deflate data at all")])
      expect(yield* failing({ headers: { "content-encoding": "gzip" }, steps: [corrupt] })).toMatchObject({
        code: "model_bad_response",
        ambiguous: true,
        details: { content_encoding: "gzip" }
      })
    }))

  it.scopedLive("the output bound counts decoded bytes: a small gzip that inflates past it is model_output_limit", () =>
    Effect.gen(function*() {
      const bomb = zlib.gzipSync(`: ${"a".repeat(8 * 1024 * 1024)}\n\n`)
      expect(bomb.length).toBeLessThan(100_000)
      const fake = yield* fakeServer({ headers: { "content-encoding": "gzip" }, steps: [bomb] })
      const failure = failureOf((yield* posted(`${fake.url}/v1/x`, { limits: { stallMs: 2_000, maxOutputBytes: 100_000 } })).result)
      expect(failure).toMatchObject({ code: "model_output_limit", ambiguous: true, retryable: false })
    }))
})
