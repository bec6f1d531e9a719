/**
 * The live feed and its subscribers, through Sessions.follow on the memory journal: the rules of
 * LiveFeeds.ts and Tap.ts that an end-to-end test cannot set up exactly — what a full backlog
 * does while a subscriber is live and while it is still catching up, a commit larger than the
 * budget, one encoding shared by every subscriber, and the fan-out's pace on a clock the test
 * moves (`LiveFeeds.Pacing`): what is gathered during a pause, who joins during one, and the bounds.
 *
 * Extension Events are appended straight to the journal (the actor's folded state then lags the
 * journal, as it does for a moment after every commit). A subscriber's body is read like the server
 * reads it: as a byte stream, paused to stand for a client that stops reading.
 */
import { type Readable, Writable } from "node:stream"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Option, Stream } from "effect"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { SSE_FAN_OUT_PACE_MAX_MS, SSE_FAN_OUT_PACE_MIN_MS, SSE_WRITE_BYTES, SUBSCRIBER_BACKLOG_RECORDS } from "../../src/domain/Limits.js"
import { foldAll } from "../../src/domain/Projection.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { fromJournal } from "../../src/layers/sessions/FromJournal.js"
import { frameParts } from "../../src/layers/sessions/SseFrames.js"
import * as LiveFeeds from "../../src/layers/sessions/LiveFeeds.js"
import { paceAfter } from "../../src/layers/sessions/LiveFeeds.js"
import { entry, ReservedKinds, STREAM_ERROR, STREAM_LAGGED } from "../../src/domain/Records.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import type { ModelCall } from "../../src/services/Models.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer } from "../support/runtime.js"

const BACKLOG_BYTES = 4096

interface Frame {
  readonly id: number | undefined
  readonly event: string | undefined
  readonly json: any
}

/** Collects a body's frames as it flows; `paused` stands for a client that stops reading. */
const reader = (body: Readable) => {
  const frames: Array<Frame> = []
  const chunks: Array<Buffer> = []
  let text = ""
  let ended = false
  let wake = () => {}
  body.on("data", (chunk: Buffer) => {
    chunks.push(chunk)
    text += chunk.toString("utf8")
    let end: number
    while ((end = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, end)
      text = text.slice(end + 2)
      if (block.startsWith(":")) continue
      const field = (name: string) => [...block.matchAll(/^(\w+): (.*)$/gm)].find((m) => m[1] === name)?.[2]
      const id = field("id")
      frames.push({ id: id === undefined ? undefined : Number(id), event: field("event"), json: JSON.parse(field("data")!) })
    }
    wake()
  })
  body.on("end", () => {
    ended = true
    wake()
  })
  const until = (what: string, predicate: () => boolean) =>
    Effect.promise(() =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; ${frames.length} frames`)), 10_000)
        const check = () => {
          if (!predicate()) return
          clearTimeout(timer)
          resolve()
        }
        wake = check
        check()
      })
    )
  return {
    body,
    frames,
    chunks,
    get ended() {
      return ended
    },
    until,
    ids: () => frames.filter((f) => f.id !== undefined).map((f) => f.id!)
  }
}

const tick = (i: number, pad: number) =>
  entry("extension", { kind: "tick", payload: { i, pad: "x".repeat(pad) }, origin: { kind: "agentloop", sequence: 1 } })

const setup = Effect.gen(function*() {
  const sessions = yield* Sessions
  const journal = yield* Journal
  const { session_id } = yield* sessions.create({ model: { provider: "scripted" } })
  /** Appends one tick per commit; `spaced`: letting the feed publish each before the next. */
  const emit = (from: number, count: number, pad: number, spaced = true) =>
    Effect.forEach(
      Array.from({ length: count }, (_, k) => from + k),
      (i) => Effect.zipRight(journal.append(session_id, [tick(i, pad)]), spaced ? Effect.sleep("1 millis") : Effect.void),
      { discard: true }
    )
  /** Every Event of the session, by pages. */
  const all = Effect.gen(function*() {
    const out: Array<number> = []
    let after = 0
    for (;;) {
      const page = yield* sessions.events(session_id, { after, limit: 1000 })
      if (page.events.length === 0) return out
      out.push(...page.events.map((e) => e.sequence))
      after = page.next_cursor
    }
  })
  return { sessions, session: session_id as SessionId, emit, all }
})

// Hundreds of subscribers follow one session here, more than a session's default share of streams.
const layer = runtimeLayer({ config: { sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0, sseMaxSubscribersPerSession: 256 } })

describe("live feeds", () => {
  it.scopedLive("a live subscriber that stops reading is cut off once its backlog would pass the byte budget: after every Event handed over, a stream_lagged frame names the last one", () =>
    Effect.gen(function*() {
      const { sessions, session, emit, all } = yield* setup
      const { body } = yield* sessions.follow(session, 0)
      const r = reader(body)
      yield* r.until("the catch-up", () => r.frames.length === 2)
      body.pause()
      // Enough to fill what the socket side buffers (SSE_WRITE_BYTES) and then the backlog.
      const pad = 1024
      const count = Math.ceil((SSE_WRITE_BYTES + 2 * BACKLOG_BYTES) / pad) + 8
      yield* emit(0, count, pad)
      yield* Effect.sleep("200 millis") // the feed's fiber publishes what was appended, while nobody reads
      body.resume()
      yield* r.until("the end of the stream", () => r.ended)
      const events = yield* all
      const ids = r.ids()
      expect(ids.length).toBeLessThan(events.length)
      expect(ids).toEqual(events.slice(0, ids.length))
      const last = r.frames.at(-1)!
      expect(last.id).toBeUndefined()
      expect(last.event).toBe("stream_lagged")
      expect(last.json.after).toBe(ids.at(-1))
      expect(r.frames.filter((f) => f.id === undefined)).toEqual([last])
    }).pipe(Effect.provide(layer)))

  it.scopedLive("a subscriber still catching up is not cut off by a full backlog: it reads on from the journal and gets every Event once, in order, then the end", () =>
    Effect.gen(function*() {
      const { sessions, session, emit, all } = yield* setup
      yield* emit(0, 1_500, 0) // more than one catch-up page
      const { body } = yield* sessions.follow(session, 0)
      // Nothing read yet: live commits pile up past the budget while catch-up has not even started.
      yield* emit(1_500, 100, 200)
      yield* Effect.sleep("200 millis")
      const r = reader(body)
      yield* r.until("the live commits", () => r.frames.some((f) => f.json.data?.i === 1_599))
      yield* emit(1_600, 10, 0)
      yield* sessions.end(session)
      yield* r.until("the end of the stream", () => r.ended)
      expect(r.frames.filter((f) => f.id === undefined)).toEqual([])
      expect(r.ids()).toEqual(yield* all)
      expect(r.frames.at(-1)!.event).toBe("session_ended")
    }).pipe(Effect.provide(layer)))

  it.scopedLive("an empty backlog takes a commit larger than the byte budget whole, and more than SUBSCRIBER_BACKLOG_RECORDS Events reach a subscriber that keeps reading", () =>
    Effect.gen(function*() {
      const { sessions, session, emit, all } = yield* setup
      const { body } = yield* sessions.follow(session, 0)
      const r = reader(body)
      yield* r.until("the catch-up", () => r.frames.length === 2)
      yield* emit(0, 1, 4 * BACKLOG_BYTES)
      yield* r.until("the large Event", () => r.frames.length === 3)
      expect(r.frames[2]!.json.data.pad.length).toBe(4 * BACKLOG_BYTES)
      for (let i = 1; i <= SUBSCRIBER_BACKLOG_RECORDS + 100; i += 100) {
        yield* emit(i, 100, 0, false)
        yield* r.until(`Event ${i + 99}`, () => r.frames.at(-1)?.json.data?.i === i + 99)
      }
      expect(r.ids()).toEqual(yield* all)
      expect(r.ended).toBe(false)
    }).pipe(Effect.provide(layer)))

  it.scopedLive("one commit is encoded once: every subscriber of the session is handed the very same bytes", () =>
    Effect.gen(function*() {
      const { sessions, session, emit } = yield* setup
      const readers = []
      for (let k = 0; k < 3; k++) {
        const r = reader((yield* sessions.follow(session, 2)).body)
        yield* r.until("the connection", () => r.chunks.length > 0)
        readers.push(r)
      }
      yield* emit(0, 1, 10)
      for (const r of readers) yield* r.until("the Event", () => r.frames.length === 1)
      const [a, b, c] = readers.map((r) => r.chunks.at(-1)!)
      expect(a).toBe(b)
      expect(b).toBe(c)
    }).pipe(Effect.provide(layer)))

  it.scopedLive("however many subscribers, each commit is encoded once: all 200 are handed the very same Buffer objects, so identical byte streams, every Event once, in order", () =>
    Effect.gen(function*() {
      const { sessions, session, emit, all } = yield* setup
      const readers = []
      for (let k = 0; k < 200; k++) {
        const r = reader((yield* sessions.follow(session, 2)).body)
        readers.push(r)
      }
      for (const r of readers) yield* r.until("the connection", () => r.chunks.length > 0)
      const connected = readers.map((r) => r.chunks.length)
      // Spaced and back to back: the feed may hand several commits over together (its pace), never a subscriber its own copy.
      yield* emit(0, 20, 50)
      yield* emit(20, 20, 50, false)
      const events = (yield* all).filter((s) => s > 2)
      for (const r of readers) yield* r.until("every Event", () => r.ids().length === events.length)
      const live = readers.map((r, k) => r.chunks.slice(connected[k]))
      for (const chunks of live) {
        expect(chunks.length).toBe(live[0]!.length)
        chunks.forEach((chunk, i) => expect(chunk).toBe(live[0]![i]))
      }
      for (const r of readers) expect(r.ids()).toEqual(events)
    }).pipe(Effect.provide(layer)))

  it("the fan-out's pace: none after a cheap fan-out, at least as long as a costly one took, never more than SSE_FAN_OUT_PACE_MAX_MS", () => {
    expect(paceAfter(0)).toBe(0)
    expect(paceAfter(SSE_FAN_OUT_PACE_MIN_MS / 2)).toBe(0)
    expect(paceAfter(SSE_FAN_OUT_PACE_MIN_MS)).toBeGreaterThanOrEqual(SSE_FAN_OUT_PACE_MIN_MS)
    expect(paceAfter(5)).toBeGreaterThanOrEqual(5)
    expect(paceAfter(5)).toBeLessThanOrEqual(SSE_FAN_OUT_PACE_MAX_MS)
    expect(paceAfter(10 * SSE_FAN_OUT_PACE_MAX_MS)).toBe(SSE_FAN_OUT_PACE_MAX_MS)
  })

  it.scopedLive("a cursor ahead of what the feed has published yet (a page already showed the newest commit) gets nothing at or before it twice", () =>
    Effect.gen(function*() {
      const { sessions, session, all } = yield* setup
      const journal = yield* Journal
      const first = reader((yield* sessions.follow(session, 0)).body) // the feed is open
      yield* first.until("the catch-up", () => first.frames.length === 2)
      // Two commits the feed has not published when the next subscriber registers, in the same step.
      yield* journal.append(session, [tick(0, 0), tick(1, 0)])
      yield* journal.append(session, [tick(2, 0)])
      const at = (yield* journal.lastSequence(session)) - 2 // inside the first of them
      const late = reader((yield* sessions.follow(session, at)).body)
      yield* first.until("the commits", () => first.frames.length === 5)
      yield* late.until("the rest", () => late.frames.some((f) => f.json.data?.i === 2))
      const events = yield* all
      expect(late.ids()).toEqual(events.filter((s) => s > at))
    }).pipe(Effect.provide(layer)))

  it.scopedLive("an extension kind with a line break, in a journal from before such kinds were refused, cannot split its frame: the Event goes without an event: line, its kind in data", () =>
    Effect.gen(function*() {
      const { sessions, session } = yield* setup
      const journal = yield* Journal
      const kind = "two\nid: 99\r\nevent: session_ended"
      yield* journal.append(session, [entry("extension", { kind, payload: {}, origin: { kind: "agentloop", sequence: 1 } })])
      const r = reader((yield* sessions.follow(session, 0)).body)
      yield* r.until("the Event", () => r.frames.length === 3)
      expect(r.frames.map((f) => [f.id, f.event])).toEqual([[1, "session_creation_started"], [2, "session_creation_ended"], [3, undefined]])
      expect(r.frames[2]!.json.kind).toBe(kind)
    }).pipe(Effect.provide(layer)))

  it("the control frames' names are reserved kinds: no Event can be taken for a stream_lagged or stream_error frame", () => {
    expect([STREAM_LAGGED, STREAM_ERROR]).toEqual(["stream_lagged", "stream_error"])
    for (const name of [STREAM_LAGGED, STREAM_ERROR]) expect(ReservedKinds.has(name)).toBe(true)
  })
})

describe("live model deltas", () => {
  /**
   * A model that streams `count` deltas (at once, before the feed has published its call's start,
   * or after `afterMs`), then waits for `go`.
   */
  const streaming = (count: number, pad: number, go: Deferred.Deferred<void>, afterMs = 0) => ({
    call: (call: ModelCall) =>
      Effect.gen(function*() {
        if (afterMs > 0) yield* Effect.sleep(afterMs)
        for (let i = 0; i < count; i++) call.onDelta?.({ type: "text", text: `${i}${"d".repeat(pad)} ` })
        yield* Deferred.await(go)
        return { text: "done", tool_calls: [], stop_reason: "end" as const }
      })
  })

  it.scopedLive("deltas streamed before the feed has published their call's start reach the reader after it, in order, without id", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ model: { provider: "scripted" } })
        const { body } = yield* sessions.follow(session_id, 0)
        const r = reader(body)
        yield* r.until("the catch-up", () => r.frames.length === 2)
        const turn = yield* Effect.fork(sessions.send(session_id, { message: "hi" }))
        yield* r.until("the deltas", () => r.frames.filter((f) => f.event === "model_delta").length === 5)
        yield* Deferred.succeed(go, undefined)
        yield* Fiber.join(turn)
        yield* r.until("the turn's end", () => r.frames.some((f) => f.event === "turn_ended"))
        const events = r.frames.map((f) => f.event)
        const started = events.indexOf("model_call_started")
        const deltas = r.frames.filter((f) => f.event === "model_delta")
        expect(deltas.map((d) => d.json.text.split("d")[0])).toEqual(["0", "1", "2", "3", "4"])
        for (const d of deltas) {
          expect(r.frames.indexOf(d)).toBeGreaterThan(started)
          expect(d.id).toBeUndefined()
          expect(d.json.model_call).toBe(r.frames[started]!.id)
        }
      }).pipe(Effect.provide(runtimeLayer({ config: { sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0 }, models: streaming(5, 10, go) })))
    }))

  it.scopedLive("a reader that stops reading loses deltas past its backlog, never its Events: recorded Events push waiting deltas out instead of cutting it off", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const { session_id } = yield* sessions.create({ model: { provider: "scripted" } })
        const { body } = yield* sessions.follow(session_id, 0)
        const r = reader(body)
        yield* r.until("the catch-up", () => r.frames.length === 2)
        body.pause()
        // Far more delta bytes than the socket side and the backlog hold together.
        const turn = yield* Effect.fork(sessions.send(session_id, { message: "hi" }))
        yield* Effect.sleep("100 millis")
        yield* Deferred.succeed(go, undefined)
        yield* Fiber.join(turn)
        yield* Effect.sleep("100 millis")
        body.resume()
        yield* r.until("the turn's end", () => r.frames.some((f) => f.event === "turn_ended"))
        expect(r.frames.map((f) => f.event)).not.toContain("stream_lagged")
        const deltas = r.frames.filter((f) => f.event === "model_delta").length
        expect(deltas).toBeGreaterThan(0)
        expect(deltas).toBeLessThan(400)
        const page = yield* sessions.events(session_id as SessionId, { after: 0, limit: 1000 })
        expect(r.ids()).toEqual(page.events.map((e) => e.sequence))
      }).pipe(Effect.provide(runtimeLayer({ config: { sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0 }, models: streaming(400, 2_000, go, 50) })))
    }))
})

/** Waits, without timing anything, until `predicate` holds (a guard fails the test after 10 s). */
const eventually = (what: string, predicate: () => boolean) =>
  Effect.promise(() =>
    new Promise<void>((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 10_000)
      const check = () => {
        if (!predicate()) return void setTimeout(check, 1)
        clearTimeout(guard)
        resolve()
      }
      check()
    })
  )

/**
 * A pace the test sets instead of the wall clock's: the clock moves when a fan-out's writes cost
 * (`cost`, in milliseconds) or when the test advances it, and a pause is over only when the test
 * advances past its end.
 */
const manualPacing = () => {
  let now = 0
  const pauses: Array<{ readonly at: number; readonly ms: number; readonly run: () => void; state: "waiting" | "over" | "cancelled" }> = []
  const self = {
    /** Milliseconds each fan-out's writes take from now on. */
    cost: 0,
    pacing: {
      now: () => now,
      afterWrites: (f: () => void) => {
        now += self.cost
        f()
      },
      after: (ms: number, run: () => void) => {
        const pause = { at: now + ms, ms, run, state: "waiting" as "waiting" | "over" | "cancelled" }
        pauses.push(pause)
        return () => void (pause.state = "cancelled")
      }
    } satisfies LiveFeeds.Pacing,
    /** The pauses the feed has asked for, in milliseconds. */
    asked: () => pauses.map((p) => p.ms),
    /** Moves the clock on, ending the pauses it passes. */
    advance: (ms: number) => {
      now += ms
      for (const p of pauses) {
        if (p.state !== "waiting" || p.at > now) continue
        p.state = "over"
        p.run()
      }
    }
  }
  return self
}

/**
 * One session's live feeds over the memory journal, paced by `manualPacing`. Its subscription is
 * watched: `gathered(s)` waits until the feed has taken every record through sequence `s` and is
 * asking for more, so that what it holds and what it has written can be checked exactly.
 */
const pacedFeeds = (config: Partial<ServerConfig.ServerConfigShape> = {}) =>
  Effect.gen(function*() {
    const { journal: base } = yield* JournalMemory.make
    let taken = 0
    let asking = false
    const journal: JournalShape = {
      ...base,
      subscribe: (session) =>
        Effect.flatMap(base.subscribe(session), (records) =>
          Effect.map(Stream.toPull(records), (pull) =>
            Stream.repeatEffectChunkOption(Effect.suspend(() => {
              asking = true
              return Effect.tap(pull, (chunk) =>
                Effect.sync(() => {
                  asking = false
                  taken = Option.match(Chunk.last(chunk), { onNone: () => taken, onSome: (r) => r.sequence })
                }))
            }))))
    }
    const pace = manualPacing()
    const feeds = yield* LiveFeeds.make(
      journal,
      { ...ServerConfig.defaults, sseBacklogBytes: BACKLOG_BYTES, sseHeartbeatMs: 0, ...config },
      fromJournal,
      pace.pacing
    )
    const session = yield* mintSessionId
    yield* base.create(session)
    yield* base.append(session, [entry("session_creation_started", { configuration: { agentloop: "official", model: "m" } })])
    const snapshot = Effect.orDie(Effect.map(base.read(session, { after: 0, limit: 100_000 }), foldAll))
    return {
      pace,
      follow: (after: number) => Effect.map(feeds.follow(session, after, snapshot), (f) => reader(f.body)),
      /** The stream's body, unread. */
      body: (after: number) => Effect.map(feeds.follow(session, after, snapshot), (f) => f.body),
      /** Commits tick `i` on its own; answers its sequence. */
      commit: (i: number, pad = 0) => Effect.zipRight(base.append(session, [tick(i, pad)]), base.lastSequence(session)),
      gathered: (sequence: number) => eventually(`the feed to take ${sequence}`, () => asking && taken >= sequence),
      all: Effect.map(base.read(session, { after: 0, limit: 100_000 }), (records) => records.map((r) => r.sequence))
    }
  })

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => from + k)

describe("the fan-out's pace, on a clock the test moves", () => {
  it.scopedLive("commits gathered during a pause reach every reader once each, in order, with their ids, in one write per reader; the pause is three times the fan-out's cost, at most SSE_FAN_OUT_PACE_MAX_MS; after it a cheap fan-out is written at once", () =>
    Effect.gen(function*() {
      const { pace, follow, commit, gathered, all } = yield* pacedFeeds()
      const readers = [yield* follow(0), yield* follow(0), yield* follow(0)]
      for (const r of readers) yield* r.until("the catch-up", () => r.ids().length === 1)
      // A fan-out that costs 5 ms: the commits of the next 15 ms wait.
      pace.cost = 5
      yield* gathered(yield* commit(0))
      for (const r of readers) yield* r.until("the first commit", () => r.ids().length === 2)
      expect(pace.asked(), "nothing was paced yet").toEqual([])
      pace.cost = 0
      const chunks = readers.map((r) => r.chunks.length)
      yield* commit(1)
      yield* commit(2)
      yield* gathered(yield* commit(3))
      expect(pace.asked()).toEqual([15])
      pace.advance(14)
      for (const r of readers) expect(r.ids(), "nothing is written during the pause").toEqual([1, 2])
      pace.advance(1)
      for (const r of readers) yield* r.until("the gathered commits", () => r.ids().length === 5)
      for (const [k, r] of readers.entries()) {
        expect(r.ids()).toEqual([1, 2, 3, 4, 5])
        expect(r.chunks.length, "one write per reader").toBe(chunks[k]! + 1)
        expect(r.chunks.at(-1), "the same bytes for every reader").toBe(readers[0]!.chunks.at(-1))
        expect(r.frames.slice(2).map((f) => f.json.data.i)).toEqual([1, 2, 3])
      }
      // That fan-out was cheap: the next commit goes out at once.
      yield* gathered(yield* commit(4))
      for (const r of readers) yield* r.until("the commit after the pause", () => r.ids().length === 6)
      expect(pace.asked(), "no pause after a cheap fan-out").toEqual([15])
      // A fan-out of 10 ms holds the next commits for 25 ms (SSE_FAN_OUT_PACE_MAX_MS), not 30.
      pace.cost = 10
      yield* gathered(yield* commit(5))
      for (const r of readers) yield* r.until("the costly commit", () => r.ids().length === 7)
      pace.cost = 0
      yield* gathered(yield* commit(6))
      expect(pace.asked()).toEqual([15, SSE_FAN_OUT_PACE_MAX_MS])
      pace.advance(SSE_FAN_OUT_PACE_MAX_MS)
      for (const r of readers) yield* r.until("the last commit", () => r.ids().length === 8)
      const events = yield* all
      for (const r of readers) expect(r.ids()).toEqual(events)
    }))

  it.scopedLive("a reader that joins during a pause, from the start, from the feed's position or from a cursor a page showed past it, gets every Event after its cursor once: no duplicate, no gap", () =>
    Effect.gen(function*() {
      const { pace, follow, commit, gathered, all } = yield* pacedFeeds()
      const first = yield* follow(0)
      yield* first.until("the catch-up", () => first.ids().length === 1)
      pace.cost = 5
      const published = yield* commit(0)
      yield* gathered(published)
      yield* first.until("the first commit", () => first.ids().length === 2)
      pace.cost = 0
      yield* commit(1)
      const held = yield* commit(2)
      yield* gathered(held)
      expect(pace.asked()).toEqual([15])
      // Joining while two commits are held: the feed's position is still `published`.
      const joiners = [] as Array<readonly [number, ReturnType<typeof reader>]>
      for (const after of [0, 1, published, published + 1, held]) joiners.push([after, yield* follow(after)])
      for (const [after, r] of joiners) {
        const caughtUp = range(after + 1, published)
        yield* r.until("the catch-up", () => r.ids().length === caughtUp.length && r.chunks.length > 0)
        expect(r.ids()).toEqual(caughtUp)
      }
      // And a commit gathered after they joined.
      const last = yield* commit(3)
      yield* gathered(last)
      pace.advance(15)
      const events = yield* all
      for (const [after, r] of [[0, first] as const, ...joiners]) {
        yield* r.until("the gathered commits", () => r.ids().at(-1) === last)
        expect(r.ids()).toEqual(events.filter((s) => s > after))
        expect(r.frames.filter((f) => f.id === undefined)).toEqual([])
      }
    }))

  it.scopedLive("a gathered write is bounded as its commits are: a live reader that stops reading is cut off once its backlog would pass the byte budget, after every Event handed over", () =>
    Effect.gen(function*() {
      const { pace, follow, commit, gathered, all } = yield* pacedFeeds()
      const r = yield* follow(0)
      yield* r.until("the catch-up", () => r.ids().length === 1)
      r.body.pause()
      // Costly fan-outs, each written at once (the clock moved past the last one's pause), until
      // what the socket side buffers is full.
      pace.cost = 5
      let i = 0
      while (r.body.readableLength < r.body.readableHighWaterMark) {
        pace.advance(SSE_FAN_OUT_PACE_MAX_MS)
        yield* gathered(yield* commit(i++, 1024))
      }
      expect(pace.asked()).toEqual([])
      // The reader's backlog is empty. Three commits gathered in the last fan-out's pause, that no
      // backlog of BACKLOG_BYTES holds together, each alone well within it.
      pace.cost = 0
      const pad = BACKLOG_BYTES / 2
      yield* commit(i++, pad)
      yield* commit(i++, pad)
      yield* gathered(yield* commit(i++, pad))
      expect(pace.asked()).toEqual([15])
      pace.advance(15)
      const events = yield* all
      r.body.resume()
      yield* r.until("every Event or the end", () => r.ended || r.ids().length === events.length)
      const ids = r.ids()
      expect(ids).toEqual(events.slice(0, ids.length))
      const lagged = r.frames.at(-1)!
      expect(lagged.event, "cut off").toBe("stream_lagged")
      expect(lagged.json.after).toBe(ids.at(-1))
      expect(ids.length).toBeLessThan(events.length)
    }))

  it.scopedLive("a reader that joins during a pause and whose socket does not drain while it catches up is cut off after BRAIN_SSE_STALL_MS, the gathered write offered meanwhile notwithstanding, after every Event handed over", () =>
    Effect.gen(function*() {
      const { pace, follow, body: unread, commit, gathered, all } = yield* pacedFeeds({ sseStallMs: 50, sseCloseGraceMs: 1 })
      const live = yield* follow(0)
      yield* live.until("the catch-up", () => live.ids().length === 1)
      // More than one catch-up page (each at most BACKLOG_BYTES).
      let i = 0
      let last = 0
      while (i < 12) last = yield* commit(i++, 1024)
      yield* gathered(last)
      pace.cost = 5
      yield* gathered(yield* commit(i++, 1024))
      yield* live.until("the commits", () => live.ids().length === i + 1)
      pace.cost = 0
      yield* commit(i++)
      yield* gathered(yield* commit(i++))
      expect(pace.asked()).toEqual([15])
      // A socket that takes one write and never drains: the pipe pauses the stream at once.
      const socket = new Writable({ highWaterMark: 1, write: () => {} })
      const body = yield* unread(0)
      body.pipe(socket)
      pace.advance(15)
      yield* live.until("the gathered commits", () => live.ids().length === i + 1)
      yield* eventually("the stalled stream's connection to close", () => socket.destroyed)
      // What the stream still held for its socket: the page it had read, then the cut.
      const rest = reader(body)
      body.resume()
      yield* rest.until("the end", () => rest.ended)
      const ids = rest.ids()
      const events = yield* all
      expect(ids.length).toBeGreaterThan(0)
      expect(ids).toEqual(events.slice(0, ids.length))
      expect(ids.length).toBeLessThan(events.length)
      const lagged = rest.frames.at(-1)!
      expect(lagged.event).toBe("stream_lagged")
      expect(lagged.json.after).toBe(ids.at(-1))
      expect(lagged.json.message).toMatch(/did not drain for 50 ms/)
      expect(live.ids()).toEqual(events)
    }))
})

describe("frame parts", () => {
  const frames = (sizes: ReadonlyArray<number>) => sizes.map((n, k) => `id: ${k + 10}\nevent: tick\ndata: ${"x".repeat(n)}\n\n`)

  it("whole frames, each part within the bytes and the count given unless it is one larger frame, views of the one buffer, with the sequence of each part's last", () => {
    const text = frames([10, 10, 100, 10, 10, 10, 10])
    const bytes = Buffer.from(text.join(""))
    const size = Buffer.byteLength(text[0]!)
    const parts = frameParts(bytes, 2 * size, 3)
    expect(parts.map((p) => Buffer.from(p.bytes).toString())).toEqual([text[0]! + text[1]!, text[2]!, text[3]! + text[4]!, text[5]! + text[6]!])
    expect(parts.map((p) => [p.events, p.last])).toEqual([[2, 11], [1, 12], [2, 14], [2, 16]])
    for (const p of parts) expect(p.bytes.buffer).toBe(bytes.buffer)
    expect(frameParts(bytes, bytes.length, 3).map((p) => p.events)).toEqual([3, 3, 1])
    expect(frameParts(bytes, bytes.length, 100)).toHaveLength(1)
  })
})
