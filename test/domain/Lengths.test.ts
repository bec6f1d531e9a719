/**
 * `Lengths`, the transcript lengths successive states share: a view never changes, whichever
 * views are appended to afterwards and in whatever order, and `at` answers as a search of its own
 * pairs would.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { Lengths } from "../../src/domain/Lengths.js"

/** The length of the last pair at or before `sequence` in `pairs`, 0 before the first: the plain reading. */
const lengthAt = (pairs: ReadonlyArray<readonly [number, number]>, sequence: number) => {
  let found = 0
  for (const [s, l] of pairs) if (s <= sequence) found = l
  return found
}

describe("Lengths", () => {
  it("every view keeps exactly its own pairs while others are appended to, from the newest or from older views", () => {
    fc.assert(
      fc.property(
        // Each step appends to one of the views made so far (picked by index), with a length.
        fc.array(fc.tuple(fc.nat(), fc.nat({ max: 1000 })), { maxLength: 60 }),
        (steps) => {
          const views: Array<{ readonly view: Lengths; readonly pairs: ReadonlyArray<readonly [number, number]> }> = [
            { view: Lengths.empty, pairs: [] }
          ]
          for (const [pick, length] of steps) {
            const from = views[pick % views.length]!
            // Sequences only grow along a view: the next is past its last.
            const sequence = (from.pairs.at(-1)?.[0] ?? 0) + 1 + (length % 3)
            views.push({ view: from.view.append(sequence, length), pairs: [...from.pairs, [sequence, length]] })
          }
          for (const { pairs, view } of views) {
            expect(view.size).toBe(pairs.length)
            expect(view.toArray()).toEqual(pairs)
            const last = pairs.at(-1)?.[0] ?? 0
            for (let s = 0; s <= last + 1; s++) expect(view.at(s)).toBe(lengthAt(pairs, s))
          }
        }
      ),
      { numRuns: 200 }
    )
  })

  it("fromPairs reads back its pairs, and the empty view answers 0 everywhere", () => {
    const pairs: Array<readonly [number, number]> = [[3, 1], [7, 4], [12, 2]]
    const view = Lengths.fromPairs(pairs)
    expect(view.toArray()).toEqual(pairs)
    expect([2, 3, 6, 7, 11, 12, 99].map((s) => view.at(s))).toEqual([0, 1, 1, 4, 4, 2, 2])
    expect(Lengths.empty.at(5)).toBe(0)
    expect(Lengths.empty.size).toBe(0)
  })
})
