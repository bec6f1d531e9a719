/**
 * A turn's caller is given its outcome before the session's cell is released: a session released
 * at once after its turn (no idle TTL, the default) has its state handed to the projection's cache
 * and its checkpoint written when due, and that work waits until the request has its answer,
 * instead of running between the turn's last durable commit and the answer (docs/benchmarks.md,
 * "One session's keyed turn, stop 59").
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as JournalMemory from "../../src/layers/JournalMemory.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { runtimeLayer, untilIdle } from "../support/runtime.js"

describe("a turn's answer and its session's release", () => {
  it.scopedLive("a send returns its outcome before its session's cell is released (the release reads the journal's size for its checkpoint after the answer), keyed or not", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      // The turn's closing records landing, and the release's checkpoint check, which asks the
      // journal for the session's size: witnesses of the turn's close and of the release.
      const closes = (entries: ReadonlyArray<{ readonly kind: string }>) => entries.some((e) => e.kind === "turn_ended")
      const journal = Layer.scoped(
        Journal,
        Effect.map(JournalMemory.make, ({ journal }): JournalShape => ({
          ...journal,
          append: (session, entries, options) =>
            Effect.tap(journal.append(session, entries, options), () => void (closes(entries) && seen.push("closed"))),
          ...(journal.enqueue === undefined ? {} : {
            enqueue: (session, entries, done) =>
              journal.enqueue!(session, entries, (exit) => {
                if (closes(entries)) seen.push("closed")
                done(exit)
              })
          }),
          size: (session) => Effect.zipRight(Effect.sync(() => void seen.push("release")), journal.size(session))
        }))
      )
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const id = (yield* sessions.create({ model: { provider: "scripted" } })).session_id
        yield* untilIdle(id)
        for (const keyed of [false, true, false]) {
          seen.length = 0
          const outcome = keyed
            ? yield* sessions.sendKeyed(id, { message: "hello" }, { key: `k-${seen.length}-${Math.random()}`, hash: "h" })
            : yield* sessions.send(id, { message: "hello" })
          seen.push("answered")
          expect(keyed ? (outcome as { _tag: string })._tag : "Answered").toBe("Answered")
          yield* untilIdle(id)
          expect(seen.slice(seen.indexOf("closed"))).toEqual(["closed", "answered", "release"])
        }
      }).pipe(Effect.provide(runtimeLayer({ journal })))
    }))
})
