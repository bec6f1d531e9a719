/**
 * Transcripts made by appending (src/domain/Appended.ts): comparing one with the transcript it was
 * appended to, and folding the delta between them, give exactly what the message-by-message
 * comparison and a copy give, whichever transcripts were appended to and in whatever order; the
 * fold hands back the transcript that was made, not a copy, only when its appended messages are
 * the delta's own.
 */
import * as v8 from "node:v8"
import * as vm from "node:vm"
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { appendedTo, appendMessages } from "../../src/domain/Appended.js"
import type { Message } from "../../src/domain/Messages.js"
import { applyDelta, diffTranscript, jsonEqual } from "../../src/domain/TranscriptDelta.js"

const message = (content: string): Message => ({ role: "user", content })

/** A full collection, as `--expose-gc` gives it (the flag set at run time, the function taken from a fresh context). */
const collect = (() => {
  v8.setFlagsFromString("--expose-gc")
  return vm.runInNewContext("gc") as () => void
})()

/** The delta by comparing every message, as `diffTranscript` does without what Appended.ts remembers. */
const scanned = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>) => {
  let keep = 0
  const n = Math.min(from.length, to.length)
  while (keep < n && (from[keep] === to[keep] || jsonEqual(from[keep], to[keep]))) keep++
  return { keep, append: to.slice(keep) }
}

describe("transcripts made by appending", () => {
  it("diff and fold agree with the scan and the copy, for transcripts appended to from any earlier one, in any order, with equal copies among them", () => {
    fc.assert(
      fc.property(
        // Each step: which transcript made so far to start from, what to append, and whether to
        // compare with a copy of it (equal messages, other objects) instead.
        fc.array(fc.tuple(fc.nat(), fc.array(fc.string({ maxLength: 3 }), { maxLength: 3 }), fc.boolean()), { maxLength: 40 }),
        (steps) => {
          const made: Array<ReadonlyArray<Message>> = [[]]
          for (const [pick, texts, copy] of steps) {
            const base = made[pick % made.length]!
            const next = appendMessages(base, texts.map(message))
            made.push(next)
            expect(next).toEqual([...base, ...texts.map(message)])
            // Compared with every transcript made so far, and with a copy of one.
            for (const from of made) {
              const other = copy ? from.map((m) => ({ ...m })) : from
              const delta = diffTranscript(other, next)
              expect(delta).toEqual(scanned(other, next))
              const folded = applyDelta(other, delta)
              expect(folded).toEqual(next)
            }
          }
        }
      )
    )
  })

  it("the fold of an append hands back the transcript made by appending those very messages, and copies when the messages are others (a delta read from the journal)", () => {
    const saved = [message("a"), message("b")]
    const next = appendMessages(saved, [message("c")])
    expect(appendedTo(saved)).toBe(next)
    const delta = diffTranscript(saved, next)
    expect(delta).toEqual({ keep: 2, append: [message("c")] })
    expect(applyDelta(saved, delta)).toBe(next)
    // The same delta as parsed from a record: equal messages, other objects.
    const parsed = JSON.parse(JSON.stringify(delta))
    const copied = applyDelta(saved, parsed)
    expect(copied).not.toBe(next)
    expect(copied).toEqual(next)
    // Appending nothing is the transcript itself.
    expect(appendMessages(next, [])).toBe(next)
    expect(diffTranscript(next, next)).toEqual({ keep: 3, append: [] })
  })

  it("a base remembers only its latest append: an earlier transcript made from it is compared message by message, with the same result", () => {
    const saved = [message("a")]
    const first = appendMessages(saved, [message("b")])
    const second = appendMessages(saved, [message("c")])
    expect(appendedTo(saved)).toBe(second)
    expect(diffTranscript(saved, first)).toEqual({ keep: 1, append: [message("b")] })
    expect(diffTranscript(saved, second)).toEqual({ keep: 1, append: [message("c")] })
  })

  it("what a transcript remembers keeps no later transcript alive: after a chain of appends, the transcripts no one holds are collected though the first is held", async () => {
    // A session's transcript is appended to at every save: were each remembered append held by
    // the one before it, a first transcript still referenced (a checkpoint's, a shared empty
    // one) would hold every later version, and a session's memory would grow with the square
    // of its turns.
    const first: ReadonlyArray<Message> = [message("0")]
    const made: Array<WeakRef<ReadonlyArray<Message>>> = []
    let latest = first
    for (let i = 1; i <= 50; i++) {
      latest = appendMessages(latest, [message(String(i))])
      made.push(new WeakRef(latest))
    }
    // The last one is still held and still remembered as appended to the one before it.
    const last = latest
    // Past this job, whose WeakRefs keep their targets until it ends.
    await new Promise((resolve) => setImmediate(resolve))
    collect()
    collect()
    const alive = made.slice(0, -1).filter((r) => r.deref() !== undefined).length
    expect(alive).toBe(0)
    expect(first).toHaveLength(1)
    expect(last).toHaveLength(51)
  })
})
