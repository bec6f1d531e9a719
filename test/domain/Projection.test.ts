import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { HashMap, Option } from "effect"
import { eventsOf } from "../../src/domain/Events.js"
import { empty, fold, foldAll, foldMany, kvRead, noEventsAfter, type SessionState, stateBytes } from "../../src/domain/Projection.js"
import { liveRequest, pruneRequests, requestId } from "../../src/domain/Requests.js"
import { deserializeState, serializeState } from "../../src/domain/SerializedState.js"
import { diffTranscript } from "../../src/domain/TranscriptDelta.js"
import { jsonBytes } from "../../src/domain/Size.js"
import { checkPayload, type JournalRecord, type RecordKind } from "../../src/domain/Records.js"
import { journalArb } from "../support/records.js"

const records = (...list: ReadonlyArray<[RecordKind, unknown]>): Array<JournalRecord> =>
  list.map(([kind, payload], i) => ({ sequence: i + 1, recorded_at_ms: 10 + i, kind, payload }))

const creation: [RecordKind, unknown] = ["session_creation_started", { configuration: { agentloop: "official", model: "m" } }]
const failure = { code: "interrupted", message: "restart", retryable: false, ambiguous: true }

describe("Projection folds", () => {
  it("status follows creation, turns and ending", () => {
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }],
      ["turn_ended", { sequence: 3 }],
      ["session_end_started", {}],
      ["session_ended", { sequence: 5 }]
    )
    const statuses = rs.map((_, i) => foldAll(rs.slice(0, i + 1)).status)
    expect(statuses).toEqual(["creating", "idle", "running", "idle", "ending", "ended"])
    expect(foldAll(records(creation, ["session_creation_failed", { sequence: 1, failure }])).status).toBe("failed")
  })

  it("the last activation's start and end stay after it closes, ended or failed, and through a checkpoint", () => {
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }],
      ["activation_started", { agentloop: "official" }],
      ["activation_ended", { sequence: 4 }],
      ["turn_ended", { sequence: 3 }],
      ["turn_started", { input: { message: "again" }, mode: "send" }],
      ["activation_started", { agentloop: "official" }],
      ["activation_failed", { sequence: 8, failure }],
      ["turn_failed", { sequence: 7, failure }]
    )
    const marks = rs.map((_, i) => {
      const s = foldAll(rs.slice(0, i + 1))
      return [s.lastActivation, s.lastActivationEnd]
    })
    expect(marks).toEqual([[0, 0], [0, 0], [0, 0], [4, 0], [4, 5], [4, 5], [4, 5], [8, 5], [8, 9], [8, 9]])
    const restored = deserializeState(JSON.parse(JSON.stringify(serializeState(foldAll(rs)))))
    expect([restored.lastActivation, restored.lastActivationEnd]).toEqual([8, 9])
  })

  it("a state knows a turn_failed Event comes after a cursor exactly when one does, also through a checkpoint; it knows nothing of other kinds", () =>
    fc.assert(
      fc.property(journalArb, (rs) => {
        const failed = new Set(["turn_failed"])
        for (let i = 0; i <= rs.length; i += 3) {
          const prefix = rs.slice(0, i)
          const state = foldAll(prefix)
          const restored = deserializeState(JSON.parse(JSON.stringify(serializeState(state))))
          for (let after = 0; after <= i; after++) {
            const none = !eventsOf("s", prefix, 0).some((e) => e.sequence > after && e.kind === "turn_failed")
            expect(noEventsAfter(state, failed, after)).toBe(none)
            expect(noEventsAfter(restored, failed, after)).toBe(none)
            expect(noEventsAfter(state, new Set(["turn_failed", "turn_ended"]), after)).toBe(false)
          }
        }
      })
    ))

  it("a state from a checkpoint written before it kept the last turn_failed knows of none only after the checkpoint's end", () => {
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }],
      ["turn_failed", { sequence: 3, failure }],
      ["turn_started", { input: { message: "again" }, mode: "send" }],
      ["turn_ended", { sequence: 5 }]
    )
    const { lastTurnFailed: _, ...older } = serializeState(foldAll(rs))
    const restored = deserializeState(JSON.parse(JSON.stringify(older)))
    expect(foldAll(rs).lastTurnFailed).toBe(4)
    expect([3, 4, 5].map((after) => noEventsAfter(restored, new Set(["turn_failed"]), after))).toEqual([false, false, false])
    expect(noEventsAfter(restored, new Set(["turn_failed"]), 6)).toBe(true)
    // An extension Event of the kind, which a journal from before its reservation may hold.
    const legacy = fold(foldAll(rs), { sequence: 7, recorded_at_ms: 20, kind: "extension", payload: { kind: "turn_failed", payload: {}, origin: { kind: "agentloop", sequence: 5 } } } as JournalRecord)
    expect(legacy.lastTurnFailed).toBe(7)
  })

  it("the transcript is the fold of {keep, append} deltas: appends keep the prefix, rewrites restart at keep", () => {
    const u = (content: string) => ({ role: "user" as const, content })
    const s = foldAll(
      records(
        creation,
        ["transcript_delta", { keep: 0, append: [u("a"), u("b")] }],
        ["transcript_delta", { keep: 2, append: [u("c")] }],
        ["transcript_delta", { keep: 1, append: [u("summary")] }]
      )
    )
    expect(s.transcript).toEqual([u("a"), u("summary")])
    expect(s.transcriptThrough).toBe(4)
    expect(diffTranscript([u("a"), u("b")], [u("a"), u("b"), u("c")])).toEqual({ keep: 2, append: [u("c")] })
    expect(diffTranscript([u("a"), u("b")], [u("x")])).toEqual({ keep: 0, append: [u("x")] })
  })

  it("kv distinguishes a missing key from a stored JSON null, and delete removes without erasing history", () => {
    const rs = records(
      creation,
      ["kv_put", { key: "n", value: null }],
      ["kv_put", { key: "x", value: 1 }],
      ["kv_delete", { key: "x" }]
    )
    const s = foldAll(rs)
    expect(kvRead(s, "n")).toEqual(Option.some(null))
    expect(kvRead(s, "x")).toEqual(Option.none())
    expect(kvRead(s, "never")).toEqual(Option.none())
    expect(kvRead(foldAll(rs.slice(0, 3)), "x")).toEqual(Option.some(1))
  })

  it("pending effects are exactly the started effects without an outcome", () => {
    const s = foldAll(
      records(
        creation,
        ["model_call_started", { message_count: 0, context: { through_sequence: 0, delta: { keep: 0, append: [] } } }],
        ["tool_call_started", { tool: "t", call_id: "c1", input: {}, deadline_at_ms: 5 }],
        ["tool_call_started", { tool: "t", call_id: "c2", input: {}, deadline_at_ms: 5 }],
        ["model_call_ended", { sequence: 2, result: { text: "ok" } }],
        ["tool_call_failed", { sequence: 4, outcome: "unknown", failure, is_error: true }]
      )
    )
    expect([...s.pending].map(([seq, p]) => [seq, p.kind])).toEqual([[3, "tool_call_started"]])
  })

  it("Events: lifecycle and effects are public, pure appends and kv stay private, a replacing delta is transcript_replaced", () => {
    const u = (content: string) => ({ role: "user" as const, content })
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["transcript_delta", { keep: 0, append: [u("a"), u("b")] }],
      ["kv_put", { key: "k", value: 1 }],
      ["transcript_delta", { keep: 2, append: [u("c")] }],
      ["transcript_delta", { keep: 1, append: [u("z")] }],
      ["extension", { kind: "progress", payload: { pct: 50 }, origin: { kind: "tool", sequence: 2 } }],
      ["session_end_started", {}]
    )
    const events = eventsOf("ses_x", rs, 0)
    expect(events.map((e) => [e.sequence, e.kind])).toEqual([
      [1, "session_creation_started"],
      [2, "session_creation_ended"],
      [6, "transcript_replaced"],
      [7, "progress"],
      [8, "session_end_started"]
    ])
    expect(events[3]!.origin).toEqual({ kind: "tool", sequence: 2 })
    expect(events[3]!.data).toEqual({ pct: 50 })
    expect(events[4]!.data).toEqual({})
  })

  it("a write's records folded with one copy of the state give the state folded one record at a time, and leave every earlier state as it was", () => {
    const whole = (s: SessionState) => ({ ...serializeState(s), bytes: s.bytes, kvBytes: s.kvBytes, transcript: [...s.transcript] })
    fc.assert(
      fc.property(journalArb, fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 40 }), (rs, sizes) => {
        let one = empty
        for (const r of rs) one = fold(one, r)
        let many = empty
        const earlier: Array<[SessionState, ReturnType<typeof whole>]> = [[many, whole(many)]]
        for (let at = 0, i = 0; at < rs.length; i++) {
          const size = sizes[i % sizes.length]!
          const before = many
          many = foldMany(many, rs.slice(at, at + size))
          expect(many).not.toBe(before)
          earlier.push([many, whole(many)])
          at += size
        }
        expect(whole(many)).toEqual(whole(one))
        for (const [state, seen] of earlier) expect(whole(state)).toEqual(seen)
        expect(foldMany(many, [])).toBe(many)
      }),
      { numRuns: 500 }
    )
  })

  it("every generated record is valid under the catalogue", () => {
    fc.assert(
      fc.property(journalArb, (rs) => rs.every((r) => checkPayload(r.kind, r.payload) === undefined)),
      { numRuns: 200 }
    )
  })

  it("a fold of the whole journal equals a fold from a serialized checkpoint plus the tail", () => {
    fc.assert(
      fc.property(journalArb, fc.nat(), (rs, cut) => {
        const k = cut % (rs.length + 1)
        const whole = foldAll(rs)
        const checkpoint = JSON.parse(JSON.stringify(serializeState(foldAll(rs.slice(0, k)))))
        const resumed = foldAll(rs.slice(k), deserializeState(checkpoint))
        expect(serializeState(resumed)).toEqual(serializeState(whole))
        // Events of the tail depend only on the transcript length at the cut.
        const before = foldAll(rs.slice(0, k))
        expect(eventsOf("s", rs.slice(k), before.transcript.length)).toEqual(eventsOf("s", rs, 0).filter((e) => e.sequence > k))
      }),
      { numRuns: 500 }
    )
  })

  it("a state's byte count, kept by each fold, equals a count from scratch and survives a checkpoint", () => {
    fc.assert(
      fc.property(journalArb, (rs) => {
        let s = empty
        for (const r of rs) {
          s = foldAll([r], s)
          expect(s.bytes).toBe(stateBytes(s))
        }
        expect(deserializeState(JSON.parse(JSON.stringify(serializeState(s)))).bytes).toBe(s.bytes)
      }),
      { numRuns: 300 }
    )
  })

  it("a state's byte count follows the content: a 1 MB message counts at least 1 MB, a short one well under 1 KiB", () => {
    const big = { role: "user" as const, content: "x".repeat(1_000_000) }
    const small = { role: "user" as const, content: "hi" }
    const base = foldAll(records(creation))
    const withBig = foldAll(records(creation, ["transcript_delta", { keep: 0, append: [big] }]))
    const withSmall = foldAll(records(creation, ["transcript_delta", { keep: 0, append: [small] }]))
    expect(withBig.bytes - base.bytes).toBeGreaterThanOrEqual(1_000_000)
    expect(withSmall.bytes - base.bytes).toBeLessThan(1024)
    // Replacing the big message by a short one gives its bytes back.
    const replaced = foldAll(
      records(creation, ["transcript_delta", { keep: 0, append: [big] }], ["transcript_delta", { keep: 0, append: [small] }])
    )
    expect(replaced.bytes - withSmall.bytes).toBeLessThan(128)
    expect(jsonBytes({ a: [1, "bc"] })).toBeGreaterThan(jsonBytes({}))
  })

  it("a keyed send's claim is its turn's; the turn's close marks it closed, and request_answered answered; a close without it leaves the request unanswered; submit keys are apart", () => {
    const turn = (mode: "send" | "submit"): [RecordKind, unknown] => ["turn_started", { input: { message: "hi" }, mode }]
    const claimed = (mode: "send" | "submit", key: string, at_ms: number): [RecordKind, unknown] => [
      "request_claimed",
      { mode, key, request_hash: `hash-${key}`, at_ms }
    ]
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      turn("send"), // 3
      ["activation_started", { agentloop: "official" }],
      claimed("send", "a", 100),
      ["turn_ended", { sequence: 3, result: { text: "hi" } }], // 6
      ["request_answered", { key: "a", at_ms: 200 }], // 7
      turn("send"), // 8
      claimed("send", "b", 300),
      ["turn_failed", { sequence: 8, failure }], // 10: recovery's close, unanswered
      turn("submit"), // 11
      claimed("submit", "a", 400)
    )
    const s = foldAll(rs)
    expect(Option.getOrUndefined(HashMap.get(s.requests, requestId("send", "a")))).toEqual({ hash: "hash-a", turn: 3, atMs: 200, closed: 6, answered: 7 })
    expect(Option.getOrUndefined(HashMap.get(s.requests, requestId("send", "b")))).toEqual({ hash: "hash-b", turn: 8, atMs: 300, closed: 10 })
    expect(Option.getOrUndefined(HashMap.get(s.requests, requestId("submit", "a")))).toEqual({ hash: "hash-a", turn: 11, atMs: 400 })
    expect(s.turnRequest).toBe(requestId("submit", "a"))
    expect(s.requestsOldest).toBe(100)
    // Within retention each is live; past it, each is gone from a lookup.
    expect(liveRequest(s, requestId("send", "a"), 1_000, 1_000)).toBeDefined()
    expect(liveRequest(s, requestId("send", "a"), 1_200, 1_000)).toBeUndefined()
    expect(liveRequest(s, requestId("send", "a"), 10_000, 0)).toBeDefined()
  })

  it("pruning drops the expired requests once the oldest is an eighth of retention past it, keeps the running turn's, and gives their bytes back", () => {
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }],
      ["request_claimed", { mode: "send", key: "old", request_hash: "h", at_ms: 0 }],
      ["turn_ended", { sequence: 3 }],
      ["request_answered", { key: "old", at_ms: 10 }],
      ["turn_started", { input: { message: "hi" }, mode: "submit" }],
      ["request_claimed", { mode: "submit", key: "running", request_hash: "h", at_ms: 20 }]
    )
    const s = foldAll(rs)
    const retention = 800
    // Expired (past 800) but not yet by an eighth more: nothing is done.
    expect(pruneRequests(s, 850, retention)).toBe(s)
    const pruned = pruneRequests(s, 2_000, retention)
    expect([...HashMap.keys(pruned.requests)]).toEqual([requestId("submit", "running")])
    expect(pruned.requestsOldest).toBe(20)
    expect(pruned.bytes).toBe(stateBytes(pruned))
    expect(pruned.bytes).toBeLessThan(s.bytes)
    expect(pruneRequests(s, 2_000, 0)).toBe(s)
  })

  it("a send claimed and never answered (its turn closed by recovery, or still running) never expires and is never pruned, whatever the retention; answered sends and submits expire; with only such sends left, pruning does not walk again within retention", () => {
    const rs = records(
      creation,
      ["session_creation_ended", { sequence: 1 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }], // 3
      ["request_claimed", { mode: "send", key: "crashed", request_hash: "h", at_ms: 0 }],
      ["turn_failed", { sequence: 3, failure }], // recovery's close: no request_answered
      ["turn_started", { input: { message: "hi" }, mode: "send" }], // 6
      ["request_claimed", { mode: "send", key: "answered", request_hash: "h", at_ms: 10 }],
      ["turn_ended", { sequence: 6 }],
      ["request_answered", { key: "answered", at_ms: 20 }],
      ["turn_started", { input: { message: "hi" }, mode: "submit" }], // 10
      ["request_claimed", { mode: "submit", key: "submitted", request_hash: "h", at_ms: 30 }],
      ["turn_ended", { sequence: 10 }],
      ["turn_started", { input: { message: "hi" }, mode: "send" }], // 13
      ["request_claimed", { mode: "send", key: "running", request_hash: "h", at_ms: 40 }]
    )
    const s = foldAll(rs)
    const retention = 800
    const late = 1_000 * retention
    expect(liveRequest(s, requestId("send", "crashed"), late, retention)).toBeDefined()
    expect(liveRequest(s, requestId("send", "running"), late, retention)).toBeDefined()
    expect(liveRequest(s, requestId("send", "answered"), late, retention)).toBeUndefined()
    expect(liveRequest(s, requestId("submit", "submitted"), late, retention)).toBeUndefined()
    const pruned = pruneRequests(s, late, retention)
    expect([...HashMap.keys(pruned.requests)].sort()).toEqual([requestId("send", "crashed"), requestId("send", "running")])
    expect(pruned.bytes).toBe(stateBytes(pruned))
    // Nothing left can expire: no walk until a retention (and its slack) from now.
    expect(pruneRequests(pruned, late + retention, retention)).toBe(pruned)
  })

  it("the empty state serializes and restores to itself", () => {
    expect(serializeState(deserializeState(serializeState(empty)))).toEqual(serializeState(empty))
  })
})

describe("folding many records at once", () => {
  it("foldAll gives the state folding one record at a time gives, from any state, and never changes the state it starts from (its own transcripts are appended to in place)", () => {
    fc.assert(
      fc.property(journalArb, fc.nat(), (rs, at) => {
        const split = at % (rs.length + 1)
        const from = foldAll(rs.slice(0, split))
        const fromTranscript = [...from.transcript]
        const fromJson = JSON.stringify(serializeState(from))
        const all = foldAll(rs.slice(split), from)
        const oneByOne = rs.slice(split).reduce(fold, from)
        expect(serializeState(all)).toEqual(serializeState(oneByOne))
        expect(all.transcript).toEqual(oneByOne.transcript)
        expect(all.bytes).toBe(oneByOne.bytes)
        expect(from.transcript).toEqual(fromTranscript)
        expect(JSON.stringify(serializeState(from))).toBe(fromJson)
      }),
      { numRuns: 500 }
    )
  })

  it("a second foldAll from the first one's state leaves the first one's transcript as it was", () => {
    const message = (i: number) => ({ role: "user" as const, content: `m${i}` })
    const deltas = (from: number, n: number): Array<JournalRecord> =>
      Array.from({ length: n }, (_, i) => ({ sequence: from + i, recorded_at_ms: 0, kind: "transcript_delta", payload: { keep: from + i - 1, append: [message(from + i)] } }))
    const first = foldAll(deltas(1, 5))
    const kept = [...first.transcript]
    const second = foldAll(deltas(6, 5), first)
    expect(first.transcript).toEqual(kept)
    expect(second.transcript.map((m) => m.content)).toEqual(Array.from({ length: 10 }, (_, i) => `m${i + 1}`))
  })
})
