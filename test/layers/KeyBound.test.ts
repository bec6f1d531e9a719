/**
 * The bound on live idempotency keys both stores share (src/layers/idempotency/KeyBound.ts), on its
 * own: a request in flight and an unresolved entry are never dropped to make room, the front sweep
 * stops at the first live entry, a full sweep is made at most once per interval (every time at interval 0), and an
 * adoption is all or none, adding none never refused.
 */
import { describe, expect, it } from "vitest"
import { KeyBound } from "../../src/layers/idempotency/KeyBound.js"

interface TestEntry {
  readonly atMs: number
  readonly running: boolean
  readonly unresolved?: boolean
}

class Bound extends KeyBound<TestEntry> {
  protected inFlight(e: TestEntry) {
    return e.running
  }

  protected unresolved(e: TestEntry) {
    return e.unresolved === true
  }
}

const RETENTION_MS = 600_000
const FULL_SWEEP_MS = 60_000

const filled = (fullSweepEveryMs: number, entries: ReadonlyArray<readonly [string, TestEntry]>, maxKeys = entries.length) => {
  const bound = new Bound(RETENTION_MS, maxKeys, fullSweepEveryMs)
  for (const [id, e] of entries) bound.entries.set(id, e)
  return bound
}

describe("KeyBound", () => {
  it("a request in flight never expires and is never dropped to make room, however old", () => {
    const bound = filled(FULL_SWEEP_MS, [["a", { atMs: 0, running: true }], ["b", { atMs: 0, running: true }]])
    expect(bound.expired(bound.entries.get("a")!, 10 * RETENTION_MS)).toBe(false)
    expect(bound.hasRoom(10 * RETENTION_MS, 1)).toBe(false)
    expect([...bound.entries.keys()]).toEqual(["a", "b"])
  })

  it("the front sweep passes over requests in flight and stops at the first live entry; the full sweep then reaches the rest, once per interval", () => {
    const now = 5 * RETENTION_MS
    const bound = filled(FULL_SWEEP_MS, [
      ["old", { atMs: 0, running: false }],
      ["running", { atMs: 0, running: true }],
      ["live", { atMs: now, running: false }],
      ["behind", { atMs: 0, running: false }]
    ])
    // The front sweep frees one: enough for one more, and nothing behind the live entry is touched.
    expect(bound.hasRoom(now, 1)).toBe(true)
    expect([...bound.entries.keys()]).toEqual(["running", "live", "behind"])
    // Two more need the full sweep, which reaches the expired entry behind the live one.
    expect(bound.hasRoom(now, 2)).toBe(true)
    expect([...bound.entries.keys()]).toEqual(["running", "live"])
    // A full sweep ran: another within the interval is not made, and one is once it has passed.
    bound.entries.set("late", { atMs: 0, running: false })
    bound.entries.set("other", { atMs: now, running: false })
    expect(bound.hasRoom(now + 1, 1)).toBe(false)
    expect(bound.entries.has("late")).toBe(true)
    expect(bound.hasRoom(now + FULL_SWEEP_MS, 1)).toBe(true)
    expect([...bound.entries.keys()]).toEqual(["running", "live", "other"])
  })

  it("an unresolved entry (a claim never answered, an ambiguous verdict) never expires and is never dropped to make room; the front sweep passes over it to the expired entries behind", () => {
    const now = 5 * RETENTION_MS
    const bound = filled(FULL_SWEEP_MS, [
      ["crashed", { atMs: 0, running: false, unresolved: true }],
      ["old", { atMs: 0, running: false }],
      ["live", { atMs: now, running: false }]
    ])
    expect(bound.expired(bound.entries.get("crashed")!, 10 * RETENTION_MS)).toBe(false)
    expect(bound.hasRoom(now, 1)).toBe(true)
    expect([...bound.entries.keys()]).toEqual(["crashed", "live"])
    expect(bound.hasRoom(now + FULL_SWEEP_MS, 2)).toBe(false)
    expect(bound.sweep(100 * RETENTION_MS)).toBe(1)
    expect([...bound.entries.keys()]).toEqual(["crashed"])
  })

  it("at interval 0 every lack of room is a full sweep", () => {
    const now = 5 * RETENTION_MS
    const bound = filled(0, [["live", { atMs: now, running: false }], ["expired", { atMs: 0, running: false }]])
    expect(bound.hasRoom(now, 1)).toBe(true)
    bound.entries.set("again", { atMs: 0, running: false })
    expect(bound.hasRoom(now, 1)).toBe(true)
    expect([...bound.entries.keys()]).toEqual(["live"])
  })

  it("an adoption is all or none, counted against the entries as they stand; adding none is never refused", () => {
    const now = 5 * RETENTION_MS
    const bound = filled(FULL_SWEEP_MS, [["a", { atMs: now, running: false }], ["b", { atMs: now, running: false }]], 3)
    expect(bound.hasRoomFor(now, ["a", "b", "c"])).toBe(true)
    expect(bound.hasRoomFor(now, ["c", "d"])).toBe(false)
    expect(bound.hasRoomFor(now, ["c", "c"])).toBe(true)
    bound.entries.set("c", { atMs: now, running: false })
    bound.entries.set("d", { atMs: now, running: false })
    // Past the bound (a complete beyond it): what is held already is still adopted in place.
    expect(bound.hasRoomFor(now, ["a", "d"])).toBe(true)
    expect(bound.hasRoomFor(now, ["e"])).toBe(false)
    expect(bound.entries.size).toBe(4)
  })
})
