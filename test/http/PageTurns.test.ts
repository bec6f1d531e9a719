/**
 * Events pages and transcripts are built BRAIN_PAGE_READS at a time in the whole process (a
 * hundred readers of an 8 MiB page at once held health checks up for 20 s): the others wait their
 * turn and are all answered, each with the contract's JSON, while requests that build no page
 * are served meanwhile. Over the real routes and handlers, with Sessions a stand-in that counts
 * the builds under way and holds each until the test lets it go.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import { Layer } from "effect"
import { Effect } from "effect"
import { Admission, apiLive } from "../../src/http/Handlers.js"
import { Agentloops } from "../../src/services/Agentloop.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Idempotency } from "../../src/services/Idempotency.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions, type SessionsShape } from "../../src/services/Sessions.js"

const ID = "ses_01jdq0000000000000000000ab"

/** A service no route under test calls: any use of it is a defect. */
const untouched = <S>() => new Proxy({}, { get: () => () => Effect.die("not called") }) as S

/** Sessions whose pages and transcripts are held until `release`, counting those under way. */
const heldReads = () => {
  const state = { building: 0, most: 0, waiting: [] as Array<() => void> }
  const held = <A>(value: A) =>
    Effect.async<A>((resume) => {
      state.building++
      state.most = Math.max(state.most, state.building)
      state.waiting.push(() => {
        state.building--
        resume(Effect.succeed(value))
      })
    })
  const sessions = {
    events: (session: string, { after }: { after: number }) =>
      held({ events: [{ session_id: session, sequence: after + 1, recorded_at_ms: 1, kind: "tick", data: { after } }], next_cursor: after + 1 }),
    transcript: () => held({ messages: [{ role: "user", content: "hello" }], through_sequence: 3 })
  } as unknown as SessionsShape
  return { state, sessions }
}

const handlerFor = (sessions: SessionsShape, pageReads: number) =>
  HttpApiBuilder.toWebHandler(
    Layer.mergeAll(
      apiLive(new Admission()).pipe(
        Layer.provide(Layer.mergeAll(
          Layer.succeed(Sessions, sessions),
          Layer.succeed(Idempotency, untouched()),
          Layer.succeed(Agentloops, untouched()),
          Layer.succeed(Hosts, untouched()),
          ServerConfig.layerWith({ pageReads })
        ))
      ),
      HttpServer.layerContext
    )
  )

const until = async (what: string, done: () => boolean) => {
  const deadline = Date.now() + 5_000
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

describe("pages and transcripts take turns", () => {
  it("at most BRAIN_PAGE_READS pages and transcripts are built at once; the rest wait their turn and are all answered with the contract's JSON, while health is served meanwhile", async () => {
    const { state, sessions } = heldReads()
    const { handler, dispose } = handlerFor(sessions, 2)
    try {
      const pages = Array.from({ length: 8 }, (_, i) => handler(new Request(`http://brain/v1/sessions/${ID}/events?after=${i}`)))
      const transcripts = Array.from({ length: 4 }, () => handler(new Request(`http://brain/v1/sessions/${ID}/transcript`)))
      await until("two builds under way", () => state.building === 2)
      // Both turns are taken: a request that builds no page is served, and no third build starts.
      const health = await handler(new Request("http://brain/health/live"))
      expect(health.status).toBe(204)
      await new Promise((resolve) => setTimeout(resolve, 50))
      expect(state.building).toBe(2)
      let released = 0
      while (released < 12) {
        await until("a build to be waiting", () => state.waiting.length > 0)
        state.waiting.shift()!()
        released++
      }
      const answered = await Promise.all([...pages, ...transcripts])
      expect(state.most).toBe(2)
      expect(answered.map((r) => r.status)).toEqual(Array(12).fill(200))
      expect(answered.every((r) => r.headers.get("content-type") === "application/json")).toBe(true)
      const bodies: Array<any> = await Promise.all(answered.map((r) => r.json()))
      expect(bodies.slice(0, 8).map((b) => b.next_cursor)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
      expect(bodies[0]).toEqual({ events: [{ session_id: ID, sequence: 1, recorded_at_ms: 1, kind: "tick", data: { after: 0 } }], next_cursor: 1 })
      expect(bodies[8]).toEqual({ messages: [{ role: "user", content: "hello" }], through_sequence: 3 })
    } finally {
      await dispose()
    }
  })

  it("a reader that goes away while it waits its turn takes no turn, and the next reader gets it", async () => {
    const { state, sessions } = heldReads()
    const { handler, dispose } = handlerFor(sessions, 1)
    try {
      const first = handler(new Request(`http://brain/v1/sessions/${ID}/events?after=0`))
      await until("the first build", () => state.building === 1)
      const gone = new AbortController()
      const abandoned = handler(new Request(`http://brain/v1/sessions/${ID}/events?after=1`, { signal: gone.signal })).catch(() => undefined)
      const third = handler(new Request(`http://brain/v1/sessions/${ID}/transcript`))
      await new Promise((resolve) => setTimeout(resolve, 20))
      gone.abort()
      await abandoned
      state.waiting.shift()!()
      expect((await first).status).toBe(200)
      await until("the third's build", () => state.waiting.length === 1)
      state.waiting.shift()!()
      expect((await third).status).toBe(200)
      expect(state.most).toBe(1)
    } finally {
      await dispose()
    }
  })
})
