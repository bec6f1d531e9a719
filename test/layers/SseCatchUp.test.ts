/**
 * SSE catch-up against a socket that does not drain, through Sessions.follow on the memory journal
 * (Tap.ts): the body is piped (as the server pipes it to the response) into a writable that stands
 * for a socket and takes nothing until the test lets it.
 *
 * - Catch-up reads the next page only once the socket has drained: a reader that takes nothing
 *   holds about one page beyond its socket's buffer, however long the session.
 * - Readers that take nothing hold, all together, at most the held-pages bound (BRAIN_ANSWER_BYTES,
 *   HeldPages.ts) and the two pages being read; the others wait before their first page, holding nothing.
 * - A reader whose socket stays undrained for BRAIN_SSE_STALL_MS while still catching up is cut off
 *   with `stream_lagged` naming the cursor to resume after; a live reader is not (its backlog
 *   bounds it).
 * - A stream that was cut off is closed if its socket has not taken what it was handed within
 *   BRAIN_SSE_CLOSE_GRACE_MS; one whose socket drains ends as usual.
 */
import { Writable } from "node:stream"
import { pipeline } from "node:stream/promises"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { entry } from "../../src/domain/Records.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

/** The backlog budget, which also bounds a catch-up page; each tick's frame is over half of it, so a page holds one. */
const BACKLOG_BYTES = 4096
const PAD = 2500
const TICKS = 200
/** What the stand-in socket buffers before it says it is full. */
const SOCKET_BYTES = 1024

const tick = (i: number) =>
  entry("extension", { kind: "tick", payload: { i, pad: "x".repeat(PAD) }, origin: { kind: "agentloop", sequence: 1 } })

/** A writable standing for a socket: it takes nothing until `drain` lets it take everything. */
const socket = () => {
  const taken: Array<Buffer> = []
  const held: Array<() => void> = []
  let draining = false
  const writable = new Writable({
    highWaterMark: SOCKET_BYTES,
    write(chunk: Buffer, _encoding, callback) {
      taken.push(chunk)
      if (draining) callback()
      else held.push(callback)
    }
  })
  return {
    writable,
    /** Everything it was handed, taken or buffered. */
    handed: () => taken.reduce((n, c) => n + c.length, 0) + writable.writableLength,
    drain: () => {
      draining = true
      for (const callback of held.splice(0)) callback()
    },
    frames: () => {
      const text = Buffer.concat(taken).toString("utf8")
      return text.split("\n\n").filter((b) => b !== "" && !b.startsWith(":")).map((block) => {
        const field = (name: string) => [...block.matchAll(/^(\w+): (.*)$/gm)].find((m) => m[1] === name)?.[2]
        const id = field("id")
        return { id: id === undefined ? undefined : Number(id), event: field("event"), json: JSON.parse(field("data")!) }
      })
    }
  }
}

/** Waits until `predicate` holds; `ms` is a hang guard, not a claim about how soon. */
const until = (what: string, predicate: () => boolean, ms = 30_000) =>
  Effect.promise(() =>
    new Promise<void>((resolve, reject) => {
      const deadline = Date.now() + ms
      const check = () => {
        if (predicate()) return resolve()
        if (Date.now() > deadline) return reject(new Error(`timed out waiting for ${what}`))
        setTimeout(check, 10)
      }
      check()
    })
  )

/** A session of TICKS ticks, each its own catch-up page. */
const setup = Effect.gen(function*() {
  const sessions = yield* Sessions
  const journal = yield* Journal
  const { session_id } = yield* sessions.create({ model: { provider: "scripted" } })
  const session = session_id as SessionId
  for (let i = 0; i < TICKS; i++) yield* journal.append(session, [tick(i)])
  const all = Effect.gen(function*() {
    const out: Array<number> = []
    let after = 0
    for (;;) {
      const page = yield* sessions.events(session, { after, limit: 1000 })
      if (page.events.length === 0) return out
      out.push(...page.events.map((e) => e.sequence))
      after = page.next_cursor
    }
  })
  return { sessions, journal, session, all }
})

/**
 * Waits until a piped stream whose socket takes nothing has been cut off: its closing frame waits
 * in the body (while it is stalled nothing does; the first case checks that), the pipe paused.
 */
const cutOff = (body: { readonly readableLength: number }) => until("the stream's cut", () => body.readableLength > 0)

const config = (more: { sseStallMs?: number; sseCloseGraceMs?: number } = {}) =>
  runtimeLayer({ config: { sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0, ...more } })

describe("SSE catch-up against a socket that does not drain", () => {
  it.scopedLive("many readers that take nothing hold, all together, at most the held-pages bound (BRAIN_ANSWER_BYTES) and two pages; the others wait holding nothing, and each gets every Event once its socket drains", () =>
    Effect.gen(function*() {
      const { sessions, session, all } = yield* setup
      const READERS = 24
      const BOUND = 3 * BACKLOG_BYTES
      const sockets = Array.from({ length: READERS }, () => socket())
      const bodies: Array<{ readonly readableLength: number }> = []
      // Each follow reads its first page before it answers: one held back waits there.
      for (const s of sockets) {
        yield* Effect.forkScoped(Effect.map(sessions.follow(session, 0), ({ body }) => {
          bodies.push(body)
          void pipeline(body, s.writable).catch(() => {})
        }))
      }
      yield* Effect.sleep("300 millis") // many turns of the event loop: every reader that could read has
      const held = sockets.reduce((n, s) => n + s.handed(), 0) + bodies.reduce((n, b) => n + b.readableLength, 0)
      // What each stream says before its pages (the connected comment) aside.
      expect(held - READERS * 16).toBeLessThanOrEqual(BOUND + 2 * BACKLOG_BYTES)
      for (const s of sockets) s.drain()
      yield* until("every reader's whole catch-up", () => sockets.every((s) => s.frames().some((f) => f.json.data?.i === TICKS - 1)))
      const events = yield* all
      for (const s of sockets) expect(s.frames().map((f) => f.id)).toEqual(events)
    }).pipe(Effect.provide(runtimeLayer({ config: { sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0, answerBytes: 3 * BACKLOG_BYTES } }))))

  it.scopedLive("catch-up reads the next page only once the socket has drained: a reader that takes nothing holds one page beyond its socket's buffer, and then gets every Event once", () =>
    Effect.gen(function*() {
      const { sessions, session, all } = yield* setup
      const { body } = yield* sessions.follow(session, 0)
      const s = socket()
      void pipeline(body, s.writable).catch(() => {})
      yield* Effect.sleep("300 millis") // many turns of the event loop: a read-ahead would have happened
      // The connected comment and one page (at most BACKLOG_BYTES, or one larger Event): nothing
      // read ahead of the socket, nothing waiting in the body.
      expect(s.handed() + body.readableLength).toBeLessThanOrEqual(SOCKET_BYTES + BACKLOG_BYTES)
      expect(body.readableLength).toBe(0)
      s.drain()
      yield* until("the whole catch-up", () => s.frames().some((f) => f.json.data?.i === TICKS - 1))
      expect(s.frames().map((f) => f.id)).toEqual(yield* all)
    }).pipe(Effect.provide(config())))

  it.scopedLive("a reader whose socket stays undrained while it is catching up is cut off after BRAIN_SSE_STALL_MS with stream_lagged, and resumes after its cursor without a gap", () =>
    Effect.gen(function*() {
      const { sessions, session, all } = yield* setup
      const { body } = yield* sessions.follow(session, 0)
      const s = socket()
      const piped = pipeline(body, s.writable)
      yield* cutOff(body)
      s.drain()
      yield* Effect.promise(() => piped)
      const frames = s.frames()
      const lagged = frames.at(-1)!
      expect(lagged.event).toBe("stream_lagged")
      expect(lagged.id).toBeUndefined()
      expect(lagged.json.message).toMatch(/did not drain for 200 ms while it was catching up/)
      const ids = frames.filter((f) => f.id !== undefined).map((f) => f.id!)
      expect(ids.length).toBeLessThan(TICKS)
      expect(lagged.json.after).toBe(ids.at(-1))
      const events = yield* all
      expect(ids).toEqual(events.slice(0, ids.length))

      // It resumes after the cursor it was given, reading along: the rest, once.
      const resumed = yield* sessions.follow(session, lagged.json.after)
      const r = socket()
      r.drain()
      void pipeline(resumed.body, r.writable).catch(() => {})
      yield* until("the rest", () => r.frames().some((f) => f.json.data?.i === TICKS - 1))
      yield* Effect.sleep("400 millis") // past the stall time: a reader that drains is not cut off
      expect([...ids, ...r.frames().map((f) => f.id)]).toEqual(events)
      expect(r.frames().map((f) => f.event)).not.toContain("stream_lagged")
    }).pipe(Effect.provide(config({ sseStallMs: 200, sseCloseGraceMs: 0 }))))

  it.scopedLive("a live reader that stops reading is not cut off by BRAIN_SSE_STALL_MS: only its backlog bounds it", () =>
    Effect.gen(function*() {
      const { sessions, session, journal, all } = yield* setup
      const last = (yield* all).at(-1)!
      const { body } = yield* sessions.follow(session, last)
      const s = socket()
      const piped = pipeline(body, s.writable).catch(() => {})
      yield* journal.append(session, [tick(TICKS)]) // one live Event, more than the socket buffers
      yield* Effect.sleep("500 millis")
      s.drain()
      yield* until("the live Event", () => s.frames().some((f) => f.json.data?.i === TICKS))
      yield* journal.append(session, [tick(TICKS + 1)])
      yield* until("the next live Event", () => s.frames().some((f) => f.json.data?.i === TICKS + 1))
      expect(s.frames().map((f) => f.event)).not.toContain("stream_lagged")
      expect(s.writable.destroyed).toBe(false)
      body.destroy()
      yield* Effect.promise(() => piped)
    }).pipe(Effect.provide(config({ sseStallMs: 200, sseCloseGraceMs: 200 }))))

  it.scopedLive("a stream that was cut off is closed once BRAIN_SSE_CLOSE_GRACE_MS has passed with its socket still holding what it was handed; one whose socket drains in time ends as usual", () =>
    Effect.gen(function*() {
      const { sessions, session } = yield* setup
      const stuck = socket()
      const stuckBody = (yield* sessions.follow(session, 0)).body
      const stuckPipe = pipeline(stuckBody, stuck.writable).then(() => "ended", () => "failed")
      const drains = socket()
      const drainsBody = (yield* sessions.follow(session, 0)).body
      const drainsPipe = pipeline(drainsBody, drains.writable).then(() => "ended", () => "failed")
      // Both are cut off at the stall time (200 ms); one socket takes everything at once after.
      yield* cutOff(stuckBody)
      yield* cutOff(drainsBody)
      drains.drain()
      expect(yield* Effect.promise(() => drainsPipe)).toBe("ended")
      expect(drains.frames().at(-1)!.event).toBe("stream_lagged")
      // The other holds its bytes: closed once the grace has passed (2 s after the cut, a margin a
      // loaded machine keeps between the cut and this look), not at the cut.
      expect(stuck.writable.destroyed).toBe(false)
      yield* until("the stuck stream's close", () => stuck.writable.destroyed)
      expect(yield* Effect.promise(() => stuckPipe)).toBe("failed")
    }).pipe(Effect.provide(config({ sseStallMs: 200, sseCloseGraceMs: 2_000 }))))
})
