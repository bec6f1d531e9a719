/**
 * The compiled official loop (dist/loops/official.wasm) against a scripted host: it makes the same
 * host calls, with the same request bytes, and returns the same result as the TypeScript loop in
 * src/loops/official.ts for the same input and answers — checked on written scenarios (some with
 * their exact bytes spelled out) and on random ones. The guest sends its transcript as a delta
 * against the saved one, and its answer's save on its output; it is compared as the host sees it —
 * expanded to the whole transcript, the output's transcript as the last `set_transcript` (delta.ts)
 * — with the TypeScript loop's whole-transcript requests.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import { expandDeltas, outputSave, remembering } from "./delta.js"
import { type Answerer, type GuestRun, type HostCall, ROOT, runGuest, shippedGuest, Wasm } from "./harness.js"
import { runTypeScriptLoop } from "./reference.js"
import type { Message } from "../../src/domain/Messages.js"
import { transcriptTail } from "../../src/domain/TranscriptTail.js"
import { admitModule } from "../../src/layers/wasm/Module.js"
import { requestTooLarge } from "../../src/layers/wasm/WorkerProtocol.js"
import { officialLoop } from "../../src/loops/official.js"

const official = shippedGuest("official")
/** How many of the last saved messages the official loop asks for (`brain_transcript_tail_length`), as admission reads it. */
const officialTail = await Effect.runPromise(admitModule(fs.readFileSync(path.join(ROOT, "dist", "loops", "official.wasm")), { maxModuleBytes: 1 << 30, maxMemoryBytes: 1 << 30 }))
/** The input as Brain gives it to the official loop: the transcript's tail it asks for, and no configuration or runtime envelope (it exports brain_configuration_unread and brain_runtime_unread). */
const tailOf = <I extends { readonly transcript: ReadonlyArray<Message>; readonly configuration?: unknown; readonly runtime?: unknown }>(input: I) => {
  const { configuration, runtime, ...rest } = input
  return {
    ...rest,
    ...(officialTail.configurationUnread ? {} : { configuration }),
    ...(officialTail.runtimeUnread || runtime === undefined ? {} : { runtime }),
    ...transcriptTail(input.transcript, undefined, officialTail.tailMessages)
  }
}

const activation = (fields: { message?: string | null; media?: Array<unknown>; transcript?: Array<unknown>; events?: Array<unknown> } = {}) => ({
  input: fields.message === undefined
    ? { message: "hello", media: fields.media ?? [] }
    : fields.message === null
    ? null
    : { message: fields.message, ...(fields.media !== undefined ? { media: fields.media } : {}) },
  transcript: fields.transcript ?? [],
  configuration: { agentloop: "official", model: { provider: "scripted" }, system: "be brief", tools: [] },
  events: fields.events ?? [],
  runtime: { session_id: "ses_1", turn: 3, activation: 4, now_ms: 1767225600000, seed: 123456789 }
})

interface Reply {
  readonly text?: string
  readonly tool_calls?: ReadonlyArray<{ id: string; name: string; input: unknown }>
  readonly reasoning?: ReadonlyArray<{ type: string; [key: string]: unknown }>
}
/** A tool call's result; `n` counts the calls the script has answered (0-based). */
type ToolAnswer = (call: { id: string; name: string; input: unknown }, n: number) => { outcome: string; output?: unknown; is_error: boolean }

/**
 * A script: the model's replies in order, each tool call's result, and host errors by call number
 * (0-based, counting every host call).
 */
const script = (
  replies: ReadonlyArray<Reply>,
  tool: ToolAnswer = () => ({ outcome: "ok", output: null, is_error: false }),
  errors: Record<number, { code: string; message: string; retryable?: boolean; ambiguous?: boolean; details?: unknown }> = {}
): (() => Answerer) =>
() => {
  let n = 0
  let model = 0
  let tools = 0
  return (op, request) => {
    const error = errors[n++]
    if (error) return { error: { retryable: false, ambiguous: false, ...error } }
    switch (op) {
      case "model": {
        const r = replies[model++] ?? { text: "(no more replies)" }
        return {
          ok: {
            text: r.text ?? "",
            tool_calls: r.tool_calls ?? [],
            stop_reason: r.tool_calls?.length ? "tool_calls" : "end",
            ...(r.reasoning !== undefined ? { reasoning: r.reasoning } : {})
          }
        }
      }
      case "dispatch":
        return { ok: request.calls.map((c: any) => ({ call_id: c.id, name: c.name, ...tool(c, tools++) })) }
      case "set_transcript":
        return { ok: null }
      default:
        return { error: { code: "invalid_request", message: `unexpected op ${op}`, retryable: false, ambiguous: false } }
    }
  }
}

/**
 * Runs both loops on the same input and script; returns the guest's run after checking they agree:
 * `calls` as the host sees them (the deltas expanded, the output's transcript as the last
 * `set_transcript`), `raw` as the guest sent them; `output` as the host takes it, `rawOutput` as
 * the guest returned it.
 */
const same = (input: { transcript?: ReadonlyArray<unknown> }, make: () => Answerer): Omit<GuestRun, "output"> & { readonly output: string | undefined; readonly raw: ReadonlyArray<HostCall>; readonly rawOutput: string | undefined } => {
  const answerer = make()
  const host = remembering(answerer)
  // As Brain gives it to a loop that exports brain_transcript_tail: the transcript's tail.
  const wasm = runGuest(official, JSON.stringify(tailOf({ ...input, transcript: (input.transcript ?? []) as ReadonlyArray<Message> })), host.answer)
  const ts = runTypeScriptLoop(input, make())
  expect(wasm.failed).toBeUndefined()
  if (wasm.output?.startsWith(`{"ok":`)) {
    expect(wasm.output, "the answer's save rides on the output").toMatch(/,"transcript":\{"keep":\d+,"append":\[.*\]\}\}$/s)
  }
  const taken = outputSave(wasm.output, wasm.calls, host.answers, answerer)
  for (const c of taken.calls) {
    if (c.op === "model") expect(c.request, "the model is asked with a context delta").toMatch(/^\{("transcript":\{"keep":\d+,"append":\[.*\]\},)?"context":\{"keep":/s)
    if (c.op === "dispatch") expect(c.request, "a save on dispatch is a delta").toMatch(/^\{"calls":\[.*\](,"transcript":\{"keep":\d+,"append":\[.*\]\})?\}$/s)
    if (c.op === "set_transcript") expect(c.request, "the transcript is saved as a delta").toMatch(/^\{"keep":/)
  }
  const calls = expandDeltas(input.transcript ?? [], taken.calls, taken.answers)
  expect(calls).toEqual(ts.calls)
  expect(taken.output).toBe(ts.output)
  return { ...wasm, calls, raw: wasm.calls, output: taken.output, rawOutput: wasm.output }
}

const ops = (run: { calls: ReadonlyArray<{ op: string }> }) => run.calls.map((c) => c.op)

describe("the official loop, compiled", () => {
  it("imports only env.memory, brain.call and brain.fail, and exports the ABI's names", () => {
    expect(Wasm.Module.imports(official.module).map((i) => `${i.module}.${i.name}:${i.kind}`).sort()).toEqual([
      "brain.call:function",
      "brain.fail:function",
      "env.memory:memory"
    ])
    const exports = Wasm.Module.exports(official.module).map((e) => e.name)
    expect(exports).toEqual(expect.arrayContaining(["brain_abi_v1", "brain_alloc", "brain_run", "brain_transcript_tail", "memory"]))
    // The memory import declares the build's minimum (2 pages, scripts/build-guests.js) and no maximum: Brain sets the maximum.
    expect(official.memory.maximum).toBeUndefined()
    expect(official.memory.initial).toBe(2)
  })

  it("a plain answer: one model call (carrying the user's message's save), the answer saved with the output, {text} returned (exact bytes)", () => {
    const run = same(activation(), script([{ text: "hi there" }]))
    expect(run.calls).toEqual([
      { op: "model", request: `{"transcript":{"messages":[{"role":"user","content":"hello"}]},"messages":[{"role":"user","content":"hello"}]}` },
      { op: "set_transcript", request: `{"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"hi there"}]}` }
    ])
    expect(run.output).toBe(`{"ok":{"text":"hi there"}}`)
  })

  it("a text turn's user message rides on its first model call: saved in the call's start, the call asks with an empty context after it, and the answer's save rides on the output with only the answer: one host call per text turn (exact bytes)", () => {
    const run = same(activation(), script([{ text: "hi there" }]))
    const user = `{"role":"user","content":"hello"}`
    expect(run.raw).toEqual([{ op: "model", request: `{"transcript":{"keep":0,"append":[${user}]},"context":{"keep":1,"append":[]}}` }])
    expect(run.rawOutput).toBe(`{"ok":{"text":"hi there"},"transcript":{"keep":1,"append":[{"role":"assistant","content":"hi there"}]}}`)
    // Nothing new to save (no input, nothing repaired, no note): the call carries no save.
    const resumed = same(activation({ message: null, transcript: [{ role: "user", content: "earlier" }] }), script([{ text: "resumed" }]))
    expect(resumed.raw).toEqual([{ op: "model", request: `{"context":{"keep":1,"append":[]}}` }])
  })

  it("a turn input's media reaches the model as parts of the user's message: a text part with the message, then each media item as it is; an empty message gives the media alone; no media (or an empty list) leaves the content a plain string (exact bytes)", () => {
    const url = { type: "image", url: "https://example.com/a.png" }
    const inline = { type: "image", data: "iVBORw0KGgo=", mime_type: "image/png" }
    // Kept as it came, keys in its order: whether a provider can carry it is the adapter's to say.
    const audio = { mime_type: "audio/wav", data: "UklGRg==", type: "audio" }
    const withMedia = same(activation({ message: "what are these?", media: [url, inline, audio] }), script([{ text: "a cat" }]))
    const user = `{"role":"user","content":[{"type":"text","text":"what are these?"},${JSON.stringify(url)},${JSON.stringify(inline)},${JSON.stringify(audio)}]}`
    expect(withMedia.calls).toEqual([
      { op: "model", request: `{"messages":[${user}]}` },
      { op: "set_transcript", request: `{"messages":[${user},{"role":"assistant","content":"a cat"}]}` }
    ])
    const mediaOnly = same(activation({ message: "", media: [url] }), script([{ text: "a png" }]))
    expect(mediaOnly.calls[0]).toEqual({ op: "model", request: `{"messages":[{"role":"user","content":[${JSON.stringify(url)}]}]}` })
    for (const media of [undefined, []]) {
      const plain = same(activation({ message: "just text", ...(media !== undefined ? { media } : {}) }), script([{ text: "ok" }]))
      expect(JSON.parse(plain.calls[0]!.request).messages).toEqual([{ role: "user", content: "just text" }])
    }
  })

  it("a media turn's message is saved once a model call has taken it, not riding on the first: refused there (model_rejected) it is not kept, so later turns are not refused with it; another model failure keeps it", () => {
    const audio = { type: "audio", data: "UklGRg==", mime_type: "audio/wav" }
    const user = `{"role":"user","content":[{"type":"text","text":"listen"},${JSON.stringify(audio)}]}`
    for (const [code, kept] of [["model_rejected", false], ["model_unavailable", true]] as const) {
      const run = same(activation({ message: "listen", media: [audio] }), script([{ text: "heard" }], undefined, { 0: { code, message: `${code} happened` } }))
      expect(run.raw[0], code).toEqual({ op: "model", request: `{"context":{"keep":0,"append":[${user}]}}` })
      expect(run.calls.slice(1), code).toEqual(kept ? [{ op: "set_transcript", request: `{"messages":[${user}]}` }] : [])
      expect(JSON.parse(run.output!).error.code).toBe(code)
    }
    // Taken, it is saved with the request for tools or with the answer.
    const calls = [{ id: "c1", name: "t", input: {} }]
    const round = same(activation({ message: "listen", media: [audio] }), script([{ text: "", tool_calls: calls }, { text: "done" }]))
    expect(round.raw[1]!.op).toBe("dispatch")
    expect(round.raw[1]!.request).toContain(`"transcript":{"keep":0,"append":[${user},`)
  })

  it("a message of 8 MiB answered by a reply as large fits Brain's default guest memory of 128 MiB: each string is written with the room it needs, not three times it", () => {
    const big = "m".repeat(8 * 1024 * 1024)
    const run = runGuest(official, JSON.stringify(tailOf({ ...activation({ message: big }), transcript: [] as ReadonlyArray<Message> })), script([{ text: `${big}!` }])())
    expect(run.failed).toBeUndefined()
    expect(run.memoryBytes).toBeLessThanOrEqual(128 * 1024 * 1024)
    const output = JSON.parse(run.output!)
    expect(output.ok.text).toBe(`${big}!`)
    expect(JSON.parse(run.calls[0]!.request).transcript.append.map((m: { content: string }) => m.content.length)).toEqual([big.length])
    expect(output.transcript.append.map((m: { content: string }) => m.content.length)).toEqual([big.length + 1])
  })

  /** A round of `outputs.length` tool calls, each answered with its output; the host refuses requests above `limit` bytes as Brain does. */
  const bigRound = (outputs: ReadonlyArray<unknown>, limit = Number.POSITIVE_INFINITY, room = Number.POSITIVE_INFINITY) => {
    const calls = outputs.map((_, i) => ({ id: `c${i}`, name: "t", input: {} }))
    const make = script([{ text: "", tool_calls: calls }, { text: "done" }], (_, n) => ({ outcome: "ok", output: outputs[n], is_error: false }))
    const answerer = make()
    // The transcript as Brain saves it, and what each model call was asked with.
    let saved: Array<unknown> = []
    const asked: Array<Array<unknown>> = []
    const apply = (base: Array<unknown>, delta: { keep: number; append: Array<unknown> }) => [...base.slice(0, delta.keep), ...delta.append]
    const run = runGuest(official, JSON.stringify(tailOf({ ...activation({ message: "go" }), transcript: [] as ReadonlyArray<Message> })), (op, request) => {
      const bytes = Buffer.byteLength(JSON.stringify(request), "utf8")
      if (bytes > limit) return JSON.parse(requestTooLarge(bytes, limit))
      if (op === "set_transcript") {
        // The transcript's room (docs/abi.md): a save leaving the round open is refused past it, its tail counted from the round's assistant message.
        const next = apply(saved, request)
        const at = next.findIndex((m: any) => m.role === "assistant" && m.tool_calls?.length)
        const open = at >= 0 && next.filter((m: any) => m.role === "tool").length < outputs.length
        const bytes = open ? Buffer.byteLength(JSON.stringify(next.slice(at)), "utf8") : 2
        if (bytes > room) return { error: { code: "payload_too_large", message: "the transcript is above its room", retryable: false, ambiguous: false, details: { bytes, limit: room } } }
      }
      const answer = answerer(op, request) as { ok?: unknown }
      if (answer.ok !== undefined) {
        if (op === "set_transcript") saved = apply(saved, request)
        if (op === "dispatch" || op === "model") {
          if (request.transcript) saved = apply(saved, request.transcript)
        }
        if (op === "model") asked.push(apply(saved, request.context))
      }
      return answer
    })
    return { run, saved, asked }
  }

  it("a round of tool outputs of 20 MiB in all (five of 4 MiB) fits Brain's default guest memory of 128 MiB, and the next model call carries every output whole: each is held once, as the answer's bytes", () => {
    const outputs = Array.from({ length: 5 }, (_, i) => `${i}${"r".repeat(4 * 1024 * 1024 - 3)}`)
    const { run, asked } = bigRound(outputs)
    expect(run.failed).toBeUndefined()
    expect(run.memoryBytes).toBeLessThanOrEqual(128 * 1024 * 1024)
    expect(JSON.parse(run.output!).ok).toEqual({ text: "done" })
    expect(asked).toHaveLength(2)
    expect(asked[1]!.filter((m: any) => m.role === "tool").map((m: any) => m.content)).toEqual(outputs.map((o) => JSON.stringify(o)))
  })

  it("one tool output of 16 MiB (a Wasm tool's output at BRAIN_MAX_WASM_IO_BYTES) fits Brain's default guest memory of 128 MiB", () => {
    const output = "x".repeat(16 * 1024 * 1024 - 9)
    const { run, asked } = bigRound([output])
    expect(run.failed).toBeUndefined()
    expect(run.memoryBytes).toBeLessThanOrEqual(128 * 1024 * 1024)
    expect(asked[1]!.filter((m: any) => m.role === "tool").map((m: any) => m.content)).toEqual([JSON.stringify(output)])
  })

  it("an output of any JSON (escapes, characters of every width, numbers as written) is carried from the answer's bytes exactly as JSON.stringify writes it, errors too", () => {
    const piece = 'a"b\\c\n\u0001\u001f\u007fé€😀/<'
    const outputs: Array<unknown> = [
      { list: [piece.repeat(5000), 1.5, -0.25e-7, null, true, 12345678901234567890], [piece]: { nested: [[], {}] } },
      piece,
      "",
      []
    ]
    const calls = outputs.map((_, i) => ({ id: `c${i}`, name: "t", input: {} }))
    same(activation({ message: "go" }), script([{ text: "", tool_calls: calls }, { text: "done" }], (_, n) => ({ outcome: n === 3 ? "error" : "ok", output: outputs[n], is_error: n === 3 })))
  })

  it("a tool call whose input is more than half of BRAIN_MAX_WASM_IO_BYTES (it rides in the dispatch's calls and in the save riding with them) is saved on its own first, then dispatched without a save, and its round reaches the model", () => {
    const limit = 1024 * 1024
    const calls = [{ id: "c0", name: "t", input: { s: "i".repeat(600 * 1024) } }]
    const answerer = script([{ text: "", tool_calls: calls }, { text: "done" }], () => ({ outcome: "ok", output: "fine", is_error: false }))()
    const run = runGuest(official, JSON.stringify(tailOf({ ...activation({ message: "go" }), transcript: [] as ReadonlyArray<Message> })), (op, request) => {
      const bytes = Buffer.byteLength(JSON.stringify(request), "utf8")
      if (bytes > limit) return JSON.parse(requestTooLarge(bytes, limit))
      return answerer(op, request)
    })
    expect(run.failed).toBeUndefined()
    expect(JSON.parse(run.output!).ok).toEqual({ text: "done" })
    // The first dispatch refused (nothing of it done), the save alone, the calls alone, the model.
    expect(ops(run)).toEqual(["model", "dispatch", "set_transcript", "dispatch", "model"])
    const save = JSON.parse(run.calls[2]!.request)
    expect(save.append).toEqual([{ role: "assistant", content: "", tool_calls: calls }])
    const dispatched = JSON.parse(run.calls[3]!.request)
    expect(dispatched).toEqual({ calls })
    const asked = JSON.parse(run.calls[4]!.request)
    expect(asked.transcript.append).toEqual([{ role: "tool", tool_call_id: "c0", content: JSON.stringify("fine") }])
  })

  it("a round whose results no one request within BRAIN_MAX_WASM_IO_BYTES holds is saved in pieces within it, and the model is asked with every output whole", () => {
    const limit = 1024 * 1024
    const outputs = Array.from({ length: 5 }, (_, i) => `${i}${"r".repeat(300 * 1024)}`)
    const { run, saved, asked } = bigRound(outputs, limit)
    expect(run.failed).toBeUndefined()
    // Every request but the refused one within the bound.
    for (const c of run.calls.filter((_, i) => i !== 2)) expect(Buffer.byteLength(c.request, "utf8")).toBeLessThanOrEqual(limit)
    // The refused model call (nothing done), the pieces, then the model asked with the saved transcript.
    expect(ops(run)).toEqual(["model", "dispatch", "model", "set_transcript", "set_transcript", "model"])
    expect(asked[1]!.filter((m: any) => m.role === "tool").map((m: any) => m.content)).toEqual(outputs.map((o) => JSON.stringify(o)))
    expect(saved.filter((m: any) => m.role === "tool")).toHaveLength(5)
  })

  it("pieces saved while the round is still open stay within the transcript's room: a piece Brain refuses payload_too_large is saved shorter, and what then fits no piece reaches the model as a note", () => {
    const limit = 1024 * 1024
    const outputs = Array.from({ length: 5 }, (_, i) => `${i}${"r".repeat(300 * 1024)}`)
    const { run, asked } = bigRound(outputs, limit, 600 * 1024)
    expect(run.failed).toBeUndefined()
    expect(JSON.parse(run.output!).ok).toEqual({ text: "done" })
    const contents = asked[1]!.filter((m: any) => m.role === "tool").map((m: any) => JSON.parse(m.content) as string)
    expect(contents).toHaveLength(5)
    const whole = contents.filter((c, i) => c === outputs[i])
    const notes = contents.filter((c) => c.startsWith("[not carried: this output is "))
    expect(whole.length + notes.length).toBe(5)
    expect(notes).toHaveLength(1)
    expect(contents[0]).toBe(outputs[0])
    // The refused model call; a piece of three refused past the room, one of one saved; the rest with the note; the model.
    expect(ops(run)).toEqual(["model", "dispatch", "model", "set_transcript", "set_transcript", "set_transcript", "model"])
  })

  it("a repair answering a cut-short round from large committed outcomes (tool_results) is saved in pieces within BRAIN_MAX_WASM_IO_BYTES too, and an outcome that fits no piece becomes a note: the session is never left with a repair no request can carry", () => {
    const limit = 1024 * 1024
    const outputs = ["a".repeat(400 * 1024), "b".repeat(limit), "c".repeat(400 * 1024), "d".repeat(400 * 1024)]
    const calls = outputs.map((_, i) => ({ id: `c${i}`, name: "t", input: {} }))
    const transcript = [{ role: "user", content: "go" }, { role: "assistant", content: "", tool_calls: calls }]
    const tool_results = outputs.map((output, i) => ({ call_id: `c${i}`, name: "t", outcome: "ok", output, is_error: false }))
    let saved: Array<unknown> = transcript
    const asked: Array<Array<unknown>> = []
    const apply = (base: Array<unknown>, delta: { keep: number; append: Array<unknown> }) => [...base.slice(0, delta.keep), ...delta.append]
    const input = { ...tailOf({ ...activation({ message: "and now?" }), transcript: transcript as ReadonlyArray<Message> }), tool_results }
    const run = runGuest(official, JSON.stringify(input), (op, request) => {
      const bytes = Buffer.byteLength(JSON.stringify(request), "utf8")
      if (bytes > limit) return JSON.parse(requestTooLarge(bytes, limit))
      if (op === "set_transcript") saved = apply(saved, request)
      if (op === "model") {
        if (request.transcript) saved = apply(saved, request.transcript)
        asked.push(apply(saved, request.context))
        return { ok: { text: "done", tool_calls: [], stop_reason: "end" } }
      }
      return { ok: null }
    })
    expect(run.failed).toBeUndefined()
    expect(JSON.parse(run.output!).ok).toEqual({ text: "done" })
    const contents = asked[0]!.filter((m: any) => m.role === "tool").map((m: any) => JSON.parse(m.content) as string)
    expect(contents[0]).toBe(outputs[0])
    expect(contents[1]).toMatch(/^\[not carried: this output is 1048578 bytes as JSON, .*\(BRAIN_MAX_WASM_IO_BYTES, 1048576 bytes\); the call's tool_call_ended Event holds it\]$/)
    expect(contents.slice(2)).toEqual(outputs.slice(2))
    expect(asked[0]!.slice(-1)).toEqual([{ role: "user", content: "and now?" }])
  })

  it("an output no request within BRAIN_MAX_WASM_IO_BYTES can carry reaches the model as a note naming the bound and the Event that holds it; the round's other outputs are carried whole", () => {
    const limit = 1024 * 1024
    const outputs = ["small", "x".repeat(limit), "also small"]
    const { run, asked } = bigRound(outputs, limit)
    expect(run.failed).toBeUndefined()
    expect(JSON.parse(run.output!).ok).toEqual({ text: "done" })
    const contents = asked[1]!.filter((m: any) => m.role === "tool").map((m: any) => m.content)
    expect(contents[0]).toBe(JSON.stringify("small"))
    expect(contents[2]).toBe(JSON.stringify("also small"))
    expect(JSON.parse(contents[1])).toBe(
      `[not carried: this output is ${limit + 2} bytes as JSON, more than a request to Brain holds beside the rest (BRAIN_MAX_WASM_IO_BYTES, ${limit} bytes); the call's tool_call_ended Event holds it]`
    )
  })

  it("the model's reasoning (Anthropic's thinking blocks) is kept first in the assistant message's content, its text after it as a part, and sent back with it (exact bytes)", () => {
    const thought = { type: "thinking", thinking: "Check the weather.", signature: "EqQBCgIYAhIM" }
    const hidden = { type: "redacted_thinking", data: "EmwKAhgBEgy3" }
    const run = same(
      activation(),
      script([
        { text: "", tool_calls: [{ id: "c1", name: "weather", input: { city: "Paris" } }], reasoning: [thought, hidden] },
        { text: "Sunny.", reasoning: [thought] }
      ])
    )
    const firstAssistant = { role: "assistant", content: [thought, hidden], tool_calls: [{ id: "c1", name: "weather", input: { city: "Paris" } }] }
    expect(run.calls.map((c) => c.op)).toEqual(["model", "dispatch", "model", "set_transcript"])
    expect(JSON.parse(run.calls[1]!.request).transcript.messages[1]).toEqual(firstAssistant)
    expect(JSON.parse(run.calls[2]!.request).messages[1]).toEqual(firstAssistant)
    expect(JSON.parse(run.calls[3]!.request).messages.at(-1)).toEqual({ role: "assistant", content: [thought, { type: "text", text: "Sunny." }] })
    expect(run.output).toBe(`{"ok":{"text":"Sunny."}}`)
  })

  it("the transcript travels as a delta, each save riding on the next call: the user's message on the first model call, the request's on dispatch, the results' on the next model call, the answer's on the output, each sending only the messages added since the last successful save (exact bytes)", () => {
    const earlier = [{ role: "user", content: "earlier" }, { role: "assistant", content: "noted" }]
    const calls = [{ id: "c1", name: "read", input: { path: "/a" } }]
    const run = same(activation({ transcript: earlier }), script([{ text: "looking", tool_calls: calls }, { text: "done" }], () => ({ outcome: "ok", output: 7, is_error: false })))
    const user = `{"role":"user","content":"hello"}`
    const ask = `{"role":"assistant","content":"looking","tool_calls":${JSON.stringify(calls)}}`
    const result = `{"role":"tool","tool_call_id":"c1","content":"7"}`
    const done = `{"role":"assistant","content":"done"}`
    expect(run.raw).toEqual([
      { op: "model", request: `{"transcript":{"keep":2,"append":[${user}]},"context":{"keep":3,"append":[]}}` },
      { op: "dispatch", request: `{"calls":${JSON.stringify(calls)},"transcript":{"keep":3,"append":[${ask}]}}` },
      { op: "model", request: `{"transcript":{"keep":4,"append":[${result}]},"context":{"keep":5,"append":[]}}` }
    ])
    expect(run.rawOutput).toBe(`{"ok":{"text":"done"},"transcript":{"keep":5,"append":[${done}]}}`)
    const saved = earlier.map((m) => JSON.stringify(m)).join(",")
    expect(run.calls[1]).toEqual({ op: "dispatch", request: `{"calls":${JSON.stringify(calls)},"transcript":{"messages":[${saved},${user},${ask}]}}` })
    expect(run.calls[2]).toEqual({
      op: "model",
      request: `{"transcript":{"messages":[${saved},${user},${ask},${result}]},"messages":[${saved},${user},${ask},${result}]}`
    })
    expect(run.calls[3]).toEqual({ op: "set_transcript", request: `{"messages":[${saved},${user},${ask},${result},${done}]}` })
  })

  it("a repair keeps the saved transcript up to its first inserted result, and sends the rest after it", () => {
    const transcript = [
      { role: "user", content: "go" },
      { role: "assistant", content: "", tool_calls: [{ id: "a", name: "t", input: {} }, { id: "b", name: "t", input: {} }] },
      { role: "tool", tool_call_id: "b", content: "\"ok\"" },
      { role: "user", content: "next" },
      { role: "assistant", content: "fine" }
    ]
    const run = same(activation({ transcript }), script([{ text: "ok" }]))
    const interrupted = JSON.stringify({ role: "tool", tool_call_id: "a", content: `{"outcome":"unknown","error":"the call was interrupted; it may or may not have run"}` })
    const rest = transcript.slice(3).map((m) => JSON.stringify(m)).join(",")
    const user = `{"role":"user","content":"hello"}`
    expect(run.raw[0]).toEqual({ op: "model", request: `{"transcript":{"keep":3,"append":[${interrupted},${rest},${user}]},"context":{"keep":7,"append":[]}}` })
    expect(run.rawOutput).toBe(`{"ok":{"text":"ok"},"transcript":{"keep":7,"append":[{"role":"assistant","content":"ok"}]}}`)
    // Nothing to repair: everything saved is kept.
    const whole = same(activation({ transcript: transcript.slice(0, 1) }), script([{ text: "ok" }]))
    expect(whole.raw[0]).toEqual({ op: "model", request: `{"transcript":{"keep":1,"append":[${user}]},"context":{"keep":2,"append":[]}}` })
  })

  it("it asks Brain for the transcript's tail with none of the last messages (brain_transcript_tail_length 0): only what its repair may touch, which every test here gives it", () => {
    expect([officialTail.tail, officialTail.tailMessages]).toEqual([true, 0])
    const talk = Array.from({ length: 40 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${i}` })) as Array<Message>
    expect(tailOf({ transcript: talk })).toEqual({ transcript: [], transcript_start: 40 })
  })

  it("it names turn_failed as the only kind of Event it reads (brain_events_kind_turn_failed), as its TypeScript reference does; given other kinds as well, it makes the same calls and gives the same output", () => {
    expect(officialTail.eventKinds).toEqual(new Set(["turn_failed"]))
    expect(officialLoop.eventKinds).toEqual(new Set(["turn_failed"]))
    const failedTurn = { session_id: "ses_1", sequence: 9, recorded_at_ms: 1, kind: "turn_failed", data: { sequence: 5, failure: { code: "interrupted", message: "the server restarted", retryable: true } } }
    const others = ["activation_ended", "turn_ended", "turn_started", "activation_started"].map((kind, i) => ({ session_id: "ses_1", sequence: 10 + i, recorded_at_ms: 1, kind, data: { sequence: 1 } }))
    const runWith = (events: Array<unknown>) => {
      const run = runGuest(official, JSON.stringify(tailOf({ ...activation({ events }), transcript: [] as ReadonlyArray<Message> })), script([{ text: "done" }])())
      return [run.calls, run.output, run.failed]
    }
    const only = runWith([failedTurn])
    expect(only[2]).toBeUndefined()
    expect(JSON.stringify(only[0])).toContain("the previous turn did not finish (interrupted: the server restarted)")
    expect(runWith([failedTurn, ...others])).toEqual(only)
    expect(runWith(others)).toEqual(runWith([]))
  })

  it("it does not read its configuration (brain_configuration_unread): Brain leaves it out, and given one, large or not, it makes the same calls and gives the same output", () => {
    expect(officialTail.configurationUnread).toBe(true)
    const tools = Array.from({ length: 40 }, (_, i) => ({ name: `tool_${i}`, description: "d".repeat(300), input_schema: { type: "object", properties: { p: { type: "string" } } } }))
    const calls = [{ id: "c1", name: "tool_1", input: { p: "x" } }]
    const runWith = (configuration: unknown) => {
      const { configuration: _, ...input } = tailOf({ ...activation(), transcript: [] as ReadonlyArray<Message> })
      const make = script([{ text: "looking", tool_calls: calls }, { text: "done" }], () => ({ outcome: "ok", output: 7, is_error: false }))
      const run = runGuest(official, JSON.stringify(configuration === undefined ? input : { ...input, configuration }), make())
      return [run.calls, run.output, run.failed]
    }
    const without = runWith(undefined)
    expect(without[2]).toBeUndefined()
    expect((without[0] as ReadonlyArray<{ op: string }>).map((c) => c.op)).toEqual(["model", "dispatch", "model"])
    expect(runWith({ agentloop: "official", model: { provider: "scripted" }, tools })).toEqual(without)
    expect(runWith({ agentloop: "official", model: { provider: "scripted" }, system: "be brief", tools: [] })).toEqual(without)
  })

  it("it does not read its runtime envelope (brain_runtime_unread): Brain leaves it out, and given one, or another, it makes the same calls and gives the same output", () => {
    expect(officialTail.runtimeUnread).toBe(true)
    const calls = [{ id: "c1", name: "tool_1", input: { p: "x" } }]
    const runWith = (runtime: unknown) => {
      const input = tailOf({ ...activation(), transcript: [] as ReadonlyArray<Message> })
      expect(input).not.toHaveProperty("runtime")
      const make = script([{ text: "looking", tool_calls: calls }, { text: "done" }], () => ({ outcome: "ok", output: 7, is_error: false }))
      const run = runGuest(official, JSON.stringify(runtime === undefined ? input : { ...input, runtime }), make())
      return [run.calls, run.output, run.failed]
    }
    const without = runWith(undefined)
    expect(without[2]).toBeUndefined()
    expect((without[0] as ReadonlyArray<{ op: string }>).map((c) => c.op)).toEqual(["model", "dispatch", "model"])
    expect(runWith(activation().runtime)).toEqual(without)
    expect(runWith({ session_id: "ses_other", turn: 99, activation: 100, now_ms: 1, seed: 7 })).toEqual(without)
  })

  it("it does not read a model answer's metadata (brain_model_metadata_unread): given answers with a provider's metadata, with stop_reason only, or with none, it makes the same calls and gives the same output", () => {
    expect(officialTail.modelMetadataUnread).toBe(true)
    const calls = [{ id: "c1", name: "tool_1", input: { p: "x" } }]
    const metadata = {
      stop_reason: "end",
      usage: { input_tokens: 1234, output_tokens: 56, cache_read_input_tokens: 1024, cache_creation_input_tokens: 0 },
      response_id: "msg_01XFDUDYJgAACzvnptvVoYEL",
      model: "claude-sonnet-4-20250514",
      provider_stop_reason: "end_turn"
    }
    const runWith = (rewrite: (ok: Record<string, unknown>) => Record<string, unknown>) => {
      const input = tailOf({ ...activation(), transcript: [] as ReadonlyArray<Message> })
      const answerer = script([{ text: "looking", tool_calls: calls, reasoning: [{ type: "thinking", thinking: "hm", signature: "s" }] }, { text: "done" }], () => ({ outcome: "ok", output: 7, is_error: false }))()
      const run = runGuest(official, JSON.stringify(input), (op, request) => {
        const answer = answerer(op, request) as { ok?: Record<string, unknown> }
        return op === "model" && answer.ok !== undefined ? { ok: rewrite(answer.ok) } : answer
      })
      return [run.calls, run.output, run.failed]
    }
    const none = runWith(({ text, tool_calls, reasoning }) => ({ text, tool_calls, ...(reasoning !== undefined ? { reasoning } : {}) }))
    expect(none[2]).toBeUndefined()
    expect((none[0] as ReadonlyArray<{ op: string }>).map((c) => c.op)).toEqual(["model", "dispatch", "model"])
    expect(runWith((ok) => ok)).toEqual(none)
    expect(runWith((ok) => ({ ...ok, ...metadata }))).toEqual(none)
  })

  it("given only the transcript's tail, it repairs and saves as the TypeScript loop does with the whole: an interrupted round at the end, and one far before the last messages", () => {
    const talk = Array.from({ length: 40 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${i}` }))
    const round = { role: "assistant", content: "", tool_calls: [{ id: "x", name: "t", input: {} }, { id: "y", name: "t", input: {} }] }
    const answeredY = { role: "tool", tool_call_id: "y", content: "1" }
    const atEnd = [...talk, round, answeredY]
    const early = [...talk.slice(0, 3), round, answeredY, ...talk.slice(3)]
    for (const transcript of [atEnd, early]) {
      const start = tailOf({ transcript: transcript as Array<Message> }).transcript_start
      const run = same(activation({ transcript }), script([{ text: "ok" }]))
      // The repair's insertion is where the saved transcript stops being kept.
      const keep = transcript.indexOf(answeredY) + 1
      expect(start).toBeLessThanOrEqual(transcript.indexOf(round))
      expect(run.raw[0]!.request).toMatch(new RegExp(`^\\{"transcript":\\{"keep":${keep},"append":\\[\\{"role":"tool","tool_call_id":"x"`))
    }
  })

  it("the harness expands deltas as the host does: against the last successful save, a failed one changing nothing", () => {
    // A host error ends the official loop's activation, so the harness's expansion is checked here:
    // after a failed set_transcript the next delta still counts from the earlier save.
    const calls: Array<HostCall> = [
      { op: "set_transcript", request: `{"keep":1,"append":[{"role":"user","content":"b"}]}` },
      { op: "model", request: `{"context":{"keep":1,"append":[]},"system":"s"}` },
      { op: "set_transcript", request: `{"keep":0,"append":[{"role":"user","content":"c"}]}` },
      { op: "model", request: `{"context":{"keep":1,"append":[{"role":"user","content":"d"}]}}` }
    ]
    const answers = [{ error: { code: "cancelled" } }, { ok: {} }, { ok: null }, { ok: {} }]
    expect(expandDeltas([{ role: "user", content: "a" }], calls, answers).map((c) => c.request)).toEqual([
      `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`,
      `{"messages":[{"role":"user","content":"a"}],"system":"s"}`,
      `{"messages":[{"role":"user","content":"c"}]}`,
      `{"messages":[{"role":"user","content":"c"},{"role":"user","content":"d"}]}`
    ])
  })

  it("the harness takes the output as the host does: its transcript is the last set_transcript, the result only once it is saved", () => {
    const ok = `{"ok":{"text":"a,\\"transcript\\":{} ]}"},"transcript":{"keep":1,"append":[{"role":"assistant","content":"}"}]}}`
    const calls: Array<HostCall> = [{ op: "model", request: "{}" }]
    const saved = outputSave(ok, calls, [{ ok: {} }], () => ({ ok: null }))
    expect(saved.output).toBe(`{"ok":{"text":"a,\\"transcript\\":{} ]}"}}`)
    expect(saved.calls).toEqual([...calls, { op: "set_transcript", request: `{"keep":1,"append":[{"role":"assistant","content":"}"}]}` }])
    expect(saved.answers).toEqual([{ ok: {} }, { ok: null }])
    const refused = outputSave(ok, calls, [], () => ({ error: { code: "cancelled", message: "stop", retryable: false, ambiguous: true } }))
    expect(refused.output).toBe(`{"error":{"code":"cancelled","message":"stop","retryable":false,"ambiguous":true}}`)
    // Without a transcript the output is taken as it is, and nothing is asked.
    expect(outputSave(`{"ok":1}`, calls, [], () => expect.fail("asked")).output).toBe(`{"ok":1}`)
  })

  it("tools: the request is saved with the dispatch, all calls go together, each result (failures too) is shown to the model and saved with its call", () => {
    const calls = [
      { id: "c1", name: "read", input: { path: "/a" } },
      { id: "c2", name: "write", input: {} }
    ]
    const tool: ToolAnswer = (c) =>
      c.id === "c1" ? { outcome: "ok", output: { text: "é — \u2028 😀" }, is_error: false } : { outcome: "error", output: { message: "denied" }, is_error: true }
    const run = same(activation(), script([{ text: "let me look", tool_calls: calls }, { text: "done" }], tool))
    expect(ops(run)).toEqual(["model", "dispatch", "model", "set_transcript"])
    const dispatched = JSON.parse(run.calls[1]!.request)
    expect(dispatched.calls).toEqual(calls)
    expect(dispatched.transcript.messages.slice(1)).toEqual([{ role: "assistant", content: "let me look", tool_calls: calls }])
    const saved = JSON.parse(run.calls[2]!.request).transcript.messages
    expect(saved.slice(1)).toEqual([
      { role: "assistant", content: "let me look", tool_calls: calls },
      { role: "tool", tool_call_id: "c1", content: `{"text":"é — \u2028 😀"}` },
      { role: "tool", tool_call_id: "c2", content: `{"outcome":"error","error":{"message":"denied"}}` }
    ])
    expect(run.calls[2]!.request).toContain(`{"role":"tool","tool_call_id":"c2","content":"{\\"outcome\\":\\"error\\",\\"error\\":{\\"message\\":\\"denied\\"}}"}`)
    expect(run.output).toBe(`{"ok":{"text":"done"}}`)
  })

  it("several rounds, every outcome, a missing or null output, numbers and escapes come back as JavaScript writes them", () => {
    const round = (i: number) => ({ text: `round ${i}`, tool_calls: [{ id: `c${i}`, name: "t", input: { i, big: 12345678901234567890, f: 0.1, e: 1e21, neg: -0 } }] })
    const outcomes = ["timeout", "cancelled", "unknown", "ok"]
    const tool: ToolAnswer = (c) => {
      const i = Number(c.id.slice(1))
      const outcome = outcomes[i % outcomes.length]!
      if (i === 0) return { outcome, is_error: true } // no output at all
      if (i === 1) return { outcome, output: null, is_error: true }
      if (i === 2) return { outcome, output: "a \"quoted\" \\ \u0000\u001f\u007f/ \ud800 lone", is_error: true }
      return { outcome, output: [5e-324, 1.7976931348623157e308, 2 ** 53, -1.5e-7, "\b\f\n\r\t"], is_error: false }
    }
    const run = same(activation(), script([round(0), round(1), round(2), round(3), { text: "end" }], tool))
    expect(ops(run).filter((o) => o === "model")).toHaveLength(5)
    const last = JSON.parse(run.calls[run.calls.length - 1]!.request).messages
    expect(last.filter((m: any) => m.role === "tool").map((m: any) => m.content)).toEqual([
      `{"outcome":"timeout"}`,
      `{"outcome":"cancelled","error":null}`,
      `{"outcome":"unknown","error":"a \\"quoted\\" \\\\ \\u0000\\u001f\u007f/ \\ud800 lone"}`,
      `[5e-324,1.7976931348623157e+308,9007199254740992,-1.5e-7,"\\b\\f\\n\\r\\t"]`
    ])
  })

  it("repairs the saved transcript: each unanswered call gets an interrupted result right after its message's results", () => {
    const transcript = [
      { role: "user", content: "go" },
      { role: "assistant", content: "", tool_calls: [{ id: "a", name: "t", input: {} }, { id: "b", name: "t", input: {} }, { id: "c", name: "t", input: {} }] },
      { role: "tool", tool_call_id: "b", content: "\"ok\"" },
      { role: "user", content: "next" },
      { role: "assistant", content: "no tools", tool_calls: [] },
      { role: "assistant", content: [{ type: "text", text: "parts" }], tool_calls: [{ id: "d", name: "t", input: { x: 1 } }] },
      { role: "tool", tool_call_id: "d", content: "1" },
      { role: "assistant", content: "", tool_calls: [{ id: "e", name: "t", input: null }] }
    ]
    const run = same(activation({ transcript }), script([{ text: "ok" }]))
    const interrupted = `{"outcome":"unknown","error":"the call was interrupted; it may or may not have run"}`
    const messages = JSON.parse(run.calls[0]!.request).messages
    expect(messages.map((m: any) => m.tool_call_id ?? m.role)).toEqual([
      "user", "assistant", "b", "a", "c", "user", "assistant", "assistant", "d", "assistant", "e", "user"
    ])
    expect(messages[3]).toEqual({ role: "tool", tool_call_id: "a", content: interrupted })
    expect(run.calls[0]!.request).toContain(`{"role":"tool","tool_call_id":"e","content":${JSON.stringify(interrupted)}}`)
  })

  it("a repair answers each unanswered call with its committed outcome when the input has one (tool_results), as dispatch would have; only a call without one is told interrupted", () => {
    const transcript = [
      { role: "user", content: "go" },
      { role: "assistant", content: "", tool_calls: [{ id: "a", name: "echo", input: { e: 1 } }, { id: "b", name: "slow", input: {} }, { id: "c", name: "t", input: {} }] }
    ]
    const tool_results = [
      { call_id: "b", name: "slow", outcome: "cancelled", output: { code: "cancelled", message: "the tool call was cancelled" }, is_error: true },
      { call_id: "a", name: "echo", outcome: "ok", output: { e: 1, "é": [1.5, null] }, is_error: false },
      { call_id: "zz", name: "t", outcome: "ok", output: "not asked for", is_error: false }
    ]
    const input = { ...activation({ transcript }), tool_results }
    const run = same(input, script([{ text: "ok" }]))
    const messages = JSON.parse(run.calls[0]!.request).messages
    expect(messages.slice(2, 5)).toEqual([
      { role: "tool", tool_call_id: "a", content: JSON.stringify({ e: 1, "é": [1.5, null] }) },
      { role: "tool", tool_call_id: "b", content: JSON.stringify({ outcome: "cancelled", error: { code: "cancelled", message: "the tool call was cancelled" } }) },
      { role: "tool", tool_call_id: "c", content: JSON.stringify({ outcome: "unknown", error: "the call was interrupted; it may or may not have run" }) }
    ])
    expect(run.calls[0]!.request, "a result for a call the transcript does not leave open is not used").not.toContain("not asked for")
  })

  it("after a failed turn, a system note names the last failure (events without a failure do not count)", () => {
    const events = [
      { session_id: "ses_1", sequence: 5, recorded_at_ms: 1, kind: "turn_failed", data: { sequence: 2, failure: { code: "timeout", message: "first" } }, origin: "brain" },
      { session_id: "ses_1", sequence: 7, recorded_at_ms: 2, kind: "turn_failed", data: { sequence: 6, failure: { code: "interrupted", message: "the server stopped during this turn" } }, origin: "brain" },
      { session_id: "ses_1", sequence: 8, recorded_at_ms: 3, kind: "turn_failed", data: { sequence: 6 }, origin: "brain" },
      { session_id: "ses_1", sequence: 9, recorded_at_ms: 4, kind: "turn_ended", data: { failure: { code: "x", message: "y" } }, origin: "brain" }
    ]
    const run = same(activation({ events }), script([{ text: "ok" }]))
    expect(JSON.parse(run.calls[0]!.request).messages).toEqual([
      {
        role: "system",
        content: "Note from Brain: the previous turn did not finish (interrupted: the server stopped during this turn). Effects it started may or may not have happened; check before repeating them."
      },
      { role: "user", content: "hello" }
    ])
  })

  it("an activation without turn input adds no user message", () => {
    const transcript = [{ role: "user", content: "earlier" }]
    const run = same(activation({ message: null, transcript }), script([{ text: "resumed" }]))
    expect(run.calls[0]!.request).toBe(`{"messages":[{"role":"user","content":"earlier"}]}`)
    const { input: _, ...noInput } = activation({ transcript })
    same(noInput, script([{ text: "resumed" }]))
  })

  // Host calls of the script below: 0 model, 1 dispatch (with the tool request's save), 2 model
  // (with the results' save), 3 the answer's save on the output.
  for (const [what, at, code, retryable, ambiguous, details] of [
    ["the model fails", 0, "model_rate_limited", true, false, { status: 429, retry_after_ms: 2000 }],
    ["the dispatch carrying the tool request's save is cancelled", 1, "cancelled", false, false, undefined],
    ["dispatch is interrupted", 1, "interrupted", false, true, undefined],
    ["the model call carrying the results' save times out", 2, "timeout", true, true, undefined],
    ["the second model call hits a limit", 2, "model_call_limit", false, false, undefined],
    ["saving the answer (on the output) fails", 3, "journal_write_failed", true, true, { reason: "EIO" }]
  ] as const) {
    it(`a host error ends the activation with its code, message, flags and details as they came, with no retry: ${what}`, () => {
      const errors = { [at]: { code, message: `${code} happened`, retryable, ambiguous, ...(details !== undefined ? { details } : {}) } }
      const run = same(activation(), script([{ text: "", tool_calls: [{ id: "c1", name: "t", input: {} }] }, { text: "done" }], undefined, errors))
      if (code.startsWith("model_")) {
        // A model call that carried a save (the first one the user's message) and failed on the
        // model's side: the save may not have been made (an error says nothing of it), so it is
        // sent again, and Brain writes only what is not saved yet.
        expect(run.calls).toHaveLength(at + 2)
        expect(run.calls[at + 1]!.op).toBe("set_transcript")
        expect(JSON.parse(run.calls[at + 1]!.request).messages).toEqual(JSON.parse(run.calls[at]!.request).transcript.messages)
      } else expect(run.calls).toHaveLength(at + 1)
      expect(run.output).toBe(JSON.stringify({ error: { code, message: `${code} happened`, retryable, ambiguous, ...(details !== undefined ? { details } : {}) } }))
    })
  }

  it("a round Brain refused whole before journaling any of its calls (tool_call_limit, turn_write_limit; not ambiguous) reaches the model as not run, with the refusal's code and message, saved before the turn fails; the next turn's repair keeps that and tells no call interrupted", () => {
    const calls = [{ id: "c1", name: "t", input: {} }, { id: "c2", name: "t", input: { x: 1 } }]
    for (const code of ["tool_call_limit", "turn_write_limit"]) {
      const message = `${code} happened; none of them was journaled or sent`
      const run = same(activation({ message: "go" }), script([{ text: "", tool_calls: calls }, { text: "done" }], undefined, { 1: { code, message } }))
      expect(ops(run), code).toEqual(["model", "dispatch", "set_transcript"])
      const saved = JSON.parse(run.calls[2]!.request).messages
      const notRun = JSON.stringify({ outcome: "error", error: `the call was not run: ${code}: ${message}` })
      expect(saved.slice(-3), code).toEqual([
        { role: "assistant", content: "", tool_calls: calls },
        { role: "tool", tool_call_id: "c1", content: notRun },
        { role: "tool", tool_call_id: "c2", content: notRun }
      ])
      expect(JSON.parse(run.output!).error, code).toEqual({ code, message, retryable: false, ambiguous: false })
      const next = same(activation({ message: "again", transcript: saved }), script([{ text: "ok" }]))
      const asked = next.calls[0]!.request
      expect(asked, code).not.toContain("may or may not have run")
      expect(JSON.parse(asked).messages.slice(0, saved.length), code).toEqual(saved)
    }
    // An ambiguous refusal, or another code (a cancel, a journal failure), says nothing of the calls: left to the repair.
    for (const [code, ambiguous] of [["tool_call_limit", true], ["cancelled", false], ["journal_write_failed", true]] as const) {
      const run = same(activation({ message: "go" }), script([{ text: "", tool_calls: calls }], undefined, { 1: { code, message: "stop", ambiguous } }))
      expect(ops(run), code).toEqual(["model", "dispatch"])
    }
  })

  it("random transcripts, events, inputs with or without media, replies, tool results and errors: the same calls and result as the TypeScript loop", () => {
    const id = fc.constantFrom("c1", "c2", "c3", "c4")
    const call = fc.record({ id, name: fc.constantFrom("read", "write"), input: fc.jsonValue({ maxDepth: 2 }) })
    const content = fc.oneof(fc.string(), fc.fullUnicodeString(), fc.array(fc.record({ type: fc.constant("text"), text: fc.string() }), { maxLength: 2 }))
    const message = fc.oneof(
      fc.record({ role: fc.constantFrom("user", "system"), content }),
      fc.record({ role: fc.constant("assistant"), content, tool_calls: fc.array(call, { maxLength: 3 }) }, { requiredKeys: ["role", "content"] }),
      fc.record({ role: fc.constant("tool"), tool_call_id: id, content: fc.string() })
    )
    const failure = fc.record({ code: fc.constantFrom("interrupted", "timeout", "cancelled"), message: fc.fullUnicodeString() })
    const event = fc.record({
      session_id: fc.constant("ses_1"),
      sequence: fc.nat(),
      recorded_at_ms: fc.nat(),
      kind: fc.constantFrom("turn_failed", "turn_ended", "x.custom"),
      data: fc.record({ sequence: fc.nat(), failure }, { requiredKeys: ["sequence"] }),
      origin: fc.constant("brain")
    })
    const thinking = fc.oneof(
      fc.record({ type: fc.constant("thinking"), thinking: fc.fullUnicodeString(), signature: fc.base64String() }),
      fc.record({ type: fc.constant("redacted_thinking"), data: fc.base64String() })
    )
    const reply = fc.record(
      { text: fc.fullUnicodeString(), tool_calls: fc.array(call, { maxLength: 3 }), reasoning: fc.array(thinking, { maxLength: 2 }) },
      { requiredKeys: ["text", "tool_calls"] }
    )
    const media = fc.oneof(
      fc.record({ type: fc.constant("image"), url: fc.webUrl() }),
      fc.record({ type: fc.constantFrom("image", "audio", "file"), data: fc.base64String(), mime_type: fc.constantFrom("image/png", "audio/wav") }),
      fc.record({ mime_type: fc.string(), type: fc.fullUnicodeString() }, { requiredKeys: ["type"] })
    )
    const result = fc.record({
      outcome: fc.constantFrom("ok", "error", "timeout", "cancelled", "unknown"),
      output: fc.unicodeJsonValue({ maxDepth: 3 }),
      is_error: fc.boolean()
    })
    fc.assert(
      fc.property(
        fc.array(message, { maxLength: 40 }),
        fc.array(event, { maxLength: 4 }),
        fc.option(fc.fullUnicodeString(), { nil: null }),
        fc.option(fc.array(media, { maxLength: 3 }), { nil: undefined }),
        fc.array(reply, { minLength: 1, maxLength: 4 }),
        fc.array(result, { minLength: 1, maxLength: 4 }),
        fc.option(fc.nat({ max: 12 }), { nil: undefined }),
        fc.constantFrom("cancelled", "model_rejected", "model_unavailable", "tool_call_limit"),
        (transcript, events, text, mediaItems, replies, results, errorAt, code) => {
          const tool: ToolAnswer = (_, n) => results[n % results.length]!
          const errors = errorAt === undefined ? {} : { [errorAt]: { code, message: "stop" } }
          same(activation({ message: text, ...(mediaItems !== undefined ? { media: mediaItems } : {}), transcript, events }), script(replies, tool, errors))
        }
      ),
      { numRuns: 300 }
    )
  })

  it("memory does not grow with the number of tool rounds: a 1 MiB transcript takes the same memory for 1 round as for 10", () => {
    const transcript = Array.from({ length: 1024 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `${i} ${"é".repeat(510)}` }))
    const memoryFor = (rounds: number) => {
      const replies = Array.from({ length: rounds }, (_, i) => ({ text: `r${i}`, tool_calls: [{ id: `c${i}`, name: "t", input: {} }] }))
      const run = runGuest(official, JSON.stringify(activation({ transcript })), script([...replies, { text: "done" }])())
      expect(run.output).toMatch(/^\{"ok":\{"text":"done"\},"transcript":/)
      expect(run.calls).toHaveLength(rounds * 2 + 1)
      return run.memoryBytes
    }
    const one = memoryFor(1)
    expect(memoryFor(10)).toBe(one)
    expect(one).toBeLessThanOrEqual(16 * 1024 * 1024)
  })

  it("input that is not JSON, or an answer that is not {ok} or {error}, fails the activation through brain.fail", () => {
    const bad = runGuest(official, `{"input": `, script([])())
    expect(bad.failed).toMatch(/^the input is not JSON: unexpected end of input at byte 10/)
    expect(bad.calls).toEqual([])
    const garbled = runGuest(official, JSON.stringify(activation()), () => "{\"ok\": [1,}")
    expect(garbled.failed).toMatch(/^Brain's answer to model is not JSON: unexpected character at byte 10/)
    const neither = runGuest(official, JSON.stringify(activation()), () => ({ fine: true }))
    expect(neither.failed).toMatch(/^Brain's answer to model is neither/)
  })

  it("running out of memory traps (the activation fails); it never returns a partial result", () => {
    const transcript = Array.from({ length: 14 }, () => ({ role: "user", content: "x".repeat(64 * 1024) }))
    expect(() => runGuest(official, JSON.stringify(activation({ transcript })), script([{ text: "ok" }])(), { maximumPages: 16 })).toThrow(
      /unreachable/
    )
  })

  it("a round whose answer the memory cannot hold, or whose request it cannot write, fails the activation with a message naming BRAIN_MAX_WASM_MEMORY_BYTES, not a bare trap", () => {
    const outputs = Array.from({ length: 5 }, (_, i) => `${i}${"r".repeat(4 * 1024 * 1024 - 3)}`)
    const calls = outputs.map((_, i) => ({ id: `c${i}`, name: "t", input: {} }))
    const round = script([{ text: "", tool_calls: calls }, { text: "done" }], (_, n) => ({ outcome: "ok", output: outputs[n], is_error: false }))
    const input = JSON.stringify(tailOf({ ...activation({ message: "go" }), transcript: [] as ReadonlyArray<Message> }))
    // 16 MiB: the 20 MiB answer does not fit.
    const answer = runGuest(official, input, round(), { maximumPages: 256 })
    expect(answer.failed).toMatch(/^Brain's answer \(or the input\) of \d+ bytes does not fit the guest's memory: it holds \d+ bytes and cannot grow by the \d+ more it needs \(its maximum is the lower of the module's declared maximum and BRAIN_MAX_WASM_MEMORY_BYTES\)$/)
    expect(ops(answer)).toEqual(["model", "dispatch"])
    // 40 MiB: the answer fits, the model request carrying it does not.
    const request = runGuest(official, input, round(), { maximumPages: 640 })
    expect(request.failed).toMatch(/^a request to Brain \(or the output\) being written needs a buffer of \d+ bytes, which does not fit the guest's memory: it holds \d+ bytes .*BRAIN_MAX_WASM_MEMORY_BYTES\)$/)
    expect(ops(request)).toEqual(["model", "dispatch"])
  })
})
