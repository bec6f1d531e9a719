/**
 * The guest library's `Transcript` (guest/brain/transcript.ts), through a compiled probe
 * (guest/test/transcript.ts): it sends only what was appended since the last successful save, a
 * failed save leaves `keep` where it was, and a replaced transcript keeps the prefix that holds the
 * same values — by identity, not by content.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { expandDeltas, remembering } from "./delta.js"
import { compileProbe, type Guest, runGuest } from "./harness.js"

let probe: Guest
let saving: Guest
let tail: Guest
beforeAll(async () => {
  probe = await compileProbe("guest/test/transcript.ts")
  saving = await compileProbe("guest/test/saving.ts")
  tail = await compileProbe("guest/test/tail.ts")
}, 120_000)

describe("the guest library's Transcript", () => {
  it("sends only the appended messages, keeps keep after a failed save, and keeps the identical prefix of a replacement", () => {
    const saved = [{ role: "user", content: "a" }, { role: "assistant", content: "b" }]
    let sets = 0
    const host = remembering((op) =>
      op === "set_transcript" && sets++ === 0
        ? { error: { code: "journal_write_failed", message: "full", retryable: false, ambiguous: false } }
        : op === "model"
        ? { ok: { text: "", tool_calls: [], stop_reason: "end" } }
        : { ok: null })
    const input = { input: null, transcript: saved, configuration: {}, events: [], runtime: {} }
    const run = runGuest(probe, JSON.stringify(input), host.answer)
    expect(run.failed).toBeUndefined()
    const added = `{"role":"user","content":"added"}`
    const changed = `{"role":"assistant","content":"changed"}`
    expect(run.calls).toEqual([
      { op: "model", request: `{"context":{"keep":2,"append":[${added}]},"system":"terse"}` },
      { op: "set_transcript", request: `{"keep":2,"append":[${added}]}` },
      { op: "set_transcript", request: `{"keep":2,"append":[${added}]}` },
      { op: "set_transcript", request: `{"keep":1,"append":[${changed},${added}]}` }
    ])
    // keep: at the start, after model, after the failed save, after the save, after the change,
    // after its save, after an equal copy of the first message; then the length.
    expect(JSON.parse(run.output!).ok).toEqual([2, 2, 2, 3, 1, 3, 0, 3])
    expect(expandDeltas(saved, run.calls, host.answers).map((c) => c.request)).toEqual([
      `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},${added}],"system":"terse"}`,
      `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},${added}]}`,
      `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},${added}]}`,
      `{"messages":[{"role":"user","content":"a"},${changed},${added}]}`
    ])
  })

  it("returnOkSaving puts what changed since the last save on the output as {keep, append}, and leaves transcript out when nothing did", () => {
    const saved = [{ role: "user", content: "a" }, { role: "assistant", content: "b" }]
    const run = (what: string) => {
      const input = { input: { message: what }, transcript: saved, configuration: {}, events: [], runtime: {} }
      const r = runGuest(saving, JSON.stringify(input), () => ({ ok: null }))
      expect(r.failed).toBeUndefined()
      return { output: r.output, ops: r.calls.map((c) => c.op) }
    }
    const added = `{"role":"assistant","content":"new"}`
    expect(run("nothing")).toEqual({ output: `{"ok":"done"}`, ops: [] })
    expect(run("copied")).toEqual({ output: `{"ok":"done"}`, ops: [] })
    expect(run("appended")).toEqual({ output: `{"ok":"done","transcript":{"keep":2,"append":[${added}]}}`, ops: [] })
    expect(run("saved")).toEqual({ output: `{"ok":"done"}`, ops: ["set_transcript"] })
    // A dropped message is a change though nothing is appended.
    expect(run("dropped")).toEqual({ output: `{"ok":"done","transcript":{"keep":1,"append":[]}}`, ops: [] })
  })

  it("started at the tail, keep and length count the messages before it, at() takes indices from transcript_start, and the whole form is refused", () => {
    const saved = Array.from({ length: 20 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${i}` }))
    const start = 16
    const input = (message: string) => ({ input: { message }, transcript: saved.slice(start), transcript_start: start, configuration: {}, events: [], runtime: {} })
    const answer = (op: string, request: any) =>
      op === "transcript" ? { ok: saved.slice(request.from, request.to) } : { ok: { text: "", tool_calls: [], stop_reason: "end" } }
    const run = runGuest(tail, JSON.stringify(input("go")), answer)
    expect(run.failed).toBeUndefined()
    const added = `{"role":"user","content":"added"}`
    expect(run.calls).toEqual([
      { op: "model", request: `{"context":{"keep":20,"append":[${added}]}}` },
      { op: "transcript", request: `{"from":14,"to":16}` }
    ])
    expect(JSON.parse(run.output!).ok).toEqual({ keep: 20, length: 21, first: saved[16], before: saved.slice(14, 16) })
    const whole = runGuest(tail, JSON.stringify(input("whole")), answer)
    expect(whole.failed).toMatch(/holds only its tail/)
    expect(whole.calls).toEqual([])
  })
})
