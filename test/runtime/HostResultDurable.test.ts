/**
 * A host's result is acknowledged only once the call's outcome is durable (docs/environments.md,
 * "The host routes"): `Hosts.result` answers when the append of the call's `tool_call_ended` has
 * answered, not when the answer reaches the turn; and when that append fails, the result is
 * refused `journal_write_failed` (`details.reason: "outcome_unrecorded"`), never acknowledged.
 * The journal here holds the first append of a `tool_call_ended` until the test releases it
 * (then lands it, or fails it as a disk would).
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, FiberId, Layer } from "effect"
import type { HostId } from "../../src/domain/Ids.js"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Journal, JournalWriteFailed as JournalFailed, type JournalShape } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { framesOf } from "../support/hosts.js"
import { runtimeLayer } from "../support/runtime.js"

/** The memory journal with the first append holding a `tool_call_ended` held until `release`. */
const holding = (reached: Deferred.Deferred<void>, release: Deferred.Deferred<"land" | "fail">) =>
  Layer.scoped(
    Journal,
    Effect.map(JournalMemory.make, ({ journal: base }): JournalShape => {
      let taken = false
      // Without `enqueue` every append (the fence's outcome commits too) goes through `append`.
      const { enqueue: _, ...rest } = base
      return {
        ...rest,
        append: (session, entries, options) =>
          Effect.suspend(() => {
            if (taken || !entries.some((e) => e.kind === "tool_call_ended")) return base.append(session, entries, options)
            taken = true
            return Deferred.succeed(reached, undefined).pipe(
              Effect.zipRight(Deferred.await(release)),
              Effect.flatMap((how) =>
                how === "land" ? base.append(session, entries, options) : Effect.fail(new JournalFailed({ session, reason: "injected: the outcome's append failed" }))
              )
            )
          })
      }
    })
  )

/** The runtime over the holding journal, with the host registry and driver. */
const runtimeOf = (reached: Deferred.Deferred<void>, release: Deferred.Deferred<"land" | "fail">) =>
  runtimeLayer({ journal: holding(reached, release), hosts: {}, config: { cleanupDeadlineMs: 10_000 } }) as unknown as Layer.Layer<Sessions | Hosts | Journal, unknown>

const wallSleep = (ms: number) => Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, ms)))

/** A session whose one tool runs on a connected host; the turn is sent and the call frame read. */
const hostCall = Effect.gen(function*() {
  const sessions = yield* Sessions
  const hosts = yield* Hosts
  const { host_id } = yield* hosts.register
  const host = host_id as HostId
  const stream = yield* hosts.connect(host)
  const frames = framesOf(stream.body)
  yield* Effect.promise(() => frames.expect("ready"))
  const { session_id } = yield* sessions.create({
    model: { provider: "scripted", replies: [{ tool_calls: [{ name: "lookup", input: {} }] }, { text: "done" }] as any },
    environments: [{ name: "app", driver: "host", host }],
    tools: [{ name: "lookup", description: "lookup", environment: "app" }]
  })
  const turn = yield* Effect.fork(Effect.exit(sessions.send(session_id, { message: "go" })))
  const call = yield* Effect.promise(() => frames.expect("call"))
  return { sessions, hosts, host, session: session_id, turn, name: { session: session_id, sequence: call.data.sequence as number } }
})

describe("a host's result and the durability of the call's outcome", () => {
  it.scopedLive("a result is answered only once the call's outcome record is committed", () => {
    const reached = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<"land" | "fail">(FiberId.none)
    return Effect.gen(function*() {
      const { host, hosts, name, session, sessions, turn } = yield* hostCall
      const posting = yield* Effect.fork(hosts.result(host, name, { ok: { answer: 7 } }))
      yield* Deferred.await(reached)
      yield* wallSleep(50)
      // The answer reached the turn, whose outcome commit is held: no acknowledgement yet.
      expect(posting.unsafePoll()).toBeNull()
      yield* Deferred.succeed(release, "land")
      yield* Fiber.join(posting)
      const events = (yield* sessions.events(session, { after: 0, limit: 100 })).events
      expect(events.find((e) => e.kind === "tool_call_ended")?.data).toMatchObject({ sequence: name.sequence, outcome: "ok", output: { answer: 7 } })
      expect(Exit.isSuccess(yield* Fiber.join(turn))).toBe(true)
    }).pipe(Effect.provide(runtimeOf(reached, release)))
  })

  it.scopedLive("the same result posted again while the outcome's commit is held is answered only once it lands, as the first; the journal holds one outcome", () => {
    const reached = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<"land" | "fail">(FiberId.none)
    return Effect.gen(function*() {
      const { host, hosts, name, session, sessions, turn } = yield* hostCall
      const posting = yield* Effect.fork(hosts.result(host, name, { ok: { answer: 7 } }))
      yield* Deferred.await(reached)
      // The first post's answer is lost; the host posts the same result again.
      const again = yield* Effect.fork(hosts.result(host, name, { ok: { answer: 7 } }))
      yield* wallSleep(50)
      expect(posting.unsafePoll()).toBeNull()
      expect(again.unsafePoll()).toBeNull()
      yield* Deferred.succeed(release, "land")
      yield* Fiber.join(posting)
      yield* Fiber.join(again)
      expect(Exit.isSuccess(yield* Fiber.join(turn))).toBe(true)
      // Once more after the turn: answered at once, and nothing is written.
      const before = (yield* sessions.events(session, { after: 0, limit: 100 })).events
      yield* hosts.result(host, name, { ok: { answer: 7 } })
      const events = (yield* sessions.events(session, { after: 0, limit: 100 })).events
      expect(events).toEqual(before)
      expect(events.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed").map((e) => e.data)).toEqual([
        expect.objectContaining({ sequence: name.sequence, outcome: "ok", output: { answer: 7 } })
      ])
    }).pipe(Effect.provide(runtimeOf(reached, release)))
  })

  it.scopedLive("a result whose outcome record cannot be committed is refused journal_write_failed, never acknowledged; the same result again gets the same refusal, another result_conflict", () => {
    const reached = Deferred.unsafeMake<void>(FiberId.none)
    const release = Deferred.unsafeMake<"land" | "fail">(FiberId.none)
    return Effect.gen(function*() {
      const { host, hosts, name, turn } = yield* hostCall
      const posting = yield* Effect.fork(Effect.flip(hosts.result(host, name, { ok: { answer: 7 } })))
      yield* Deferred.await(reached)
      yield* Deferred.succeed(release, "fail")
      const refused = yield* Fiber.join(posting)
      expect(refused).toMatchObject({ _tag: "JournalWriteFailed", code: "journal_write_failed", retryable: false, details: { reason: "outcome_unrecorded", ambiguous: true } })
      yield* Fiber.join(turn)
      expect(yield* Effect.flip(hosts.result(host, name, { ok: { answer: 7 } }))).toMatchObject({
        _tag: "JournalWriteFailed",
        details: { reason: "outcome_unrecorded", ambiguous: true }
      })
      expect(yield* Effect.flip(hosts.result(host, name, { ok: { answer: 8 } }))).toMatchObject({ _tag: "Conflict", details: { reason: "result_conflict" } })
    }).pipe(Effect.provide(runtimeOf(reached, release)))
  })
})
