/**
 * A host's registration is not deduplicated by the server (its answer holds a token the server
 * keeps no copy of), so the SDK never sends it again once it may have reached the server: a lost
 * answer is reported, not retried; a connection refused before sending is retried. And no answer
 * that says `retryable: false` is retried, registration or not (the server's MAX_HOSTS refusal is
 * a non-retryable `overloaded`). Against a real server process, with faults injected into fetch.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer, Schema } from "effect"
import { Brain, BrainClient, BrainError, type Fetch, Overloaded, tool } from "../../src/sdk/index.js"
import { sharedServer } from "../support/server.js"
import { asGlobalFetch, FaultyFetch, isPost } from "./faults.js"
import { jsonAnswer } from "./support.js"

const registrations = isPost("/v1/hosts")
const full = () => jsonAnswer(503, { code: "overloaded", message: "this server keeps at most 4096 host registrations (MAX_HOSTS)", retryable: false })

describe("host registration is never sent twice once it may have reached the server", () => {
  const server = sharedServer()

  const register = (fetch: Fetch) =>
    Effect.runPromise(Effect.provide(
      Effect.either(Effect.flatMap(BrainClient, (client) => client.hosts.register())),
      Layer.merge(BrainClient.layerFetch({ baseUrl: server().baseUrl }), Layer.succeed(FetchHttpClient.Fetch, asGlobalFetch(fetch)))
    ))

  it("a registration whose answer was lost fails with network_error after one request: a retry would register another host", async () => {
    const faulty = new FaultyFetch().inject(registrations, { kind: "lose-answer" })
    const result = await register(faulty.fetch)
    expect(Either.isLeft(result) && result.left).toBeInstanceOf(BrainError)
    expect(Either.isLeft(result) && result.left).toMatchObject({ code: "network_error" })
    expect(faulty.requests(registrations)).toHaveLength(1)
  })

  it("a registration refused as overloaded with retryable: false (MAX_HOSTS) fails at once, after one request", async () => {
    const faulty = new FaultyFetch().inject(registrations, { kind: "answer", answer: full })
    const result = await register(faulty.fetch)
    expect(Either.isLeft(result) && result.left).toBeInstanceOf(Overloaded)
    expect(Either.isLeft(result) && result.left).toMatchObject({ code: "overloaded", retryable: false })
    expect(faulty.requests(registrations)).toHaveLength(1)
  })

  it("a registration whose connection was refused before sending is sent again, and registers one host", async () => {
    const faulty = new FaultyFetch().inject(registrations, { kind: "refuse-connection" })
    const result = await register(faulty.fetch)
    expect(Either.isRight(result) && result.right.host_id).toMatch(/^host_/)
    expect(faulty.requests(registrations)).toHaveLength(2)
  })

  it("a create with host tools whose registration answer was lost rejects after one registration request", async () => {
    const faulty = new FaultyFetch().inject(registrations, { kind: "lose-answer" })
    const client = new Brain({ baseUrl: server().baseUrl, fetch: faulty.fetch })
    try {
      const echo = tool({ name: "echo", input: Schema.Struct({}), run: () => "echo" })
      const refused = await client.sessions.create({ model: { provider: "scripted" }, tools: [echo] }).catch((e) => e)
      expect(refused).toMatchObject({ _tag: "BrainError", code: "network_error" })
      expect(faulty.requests(registrations)).toHaveLength(1)
      expect(faulty.requests(isPost("/v1/sessions"))).toHaveLength(0)
    } finally {
      await client.close()
    }
  })

  it("an overloaded answer with retryable: false is final for every call: a send is not sent again", async () => {
    const faulty = new FaultyFetch()
    const client = new Brain({ baseUrl: server().baseUrl, fetch: faulty.fetch })
    try {
      const session = await client.sessions.create({ model: { provider: "scripted" } })
      faulty.inject(isPost("/messages"), {
        kind: "answer",
        answer: () => jsonAnswer(503, { code: "overloaded", message: "not now, and not later", retryable: false })
      })
      const refused = await session.send("refused").catch((e) => e)
      expect(refused).toMatchObject({ code: "overloaded", status: 503, retryable: false })
      expect(faulty.requests(isPost("/messages"))).toHaveLength(1)
    } finally {
      await client.close()
    }
  })
})
