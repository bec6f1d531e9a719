/**
 * What Brain's host sees of a guest's delta-form transcript requests (docs/abi.md): each `model`
 * `{"context": {"keep", "append"}, …}` and `set_transcript` `{"keep", "append"}` rewritten into the
 * whole form `{"messages": [...], …}` it stands for — the saved transcript's first `keep` messages,
 * then `append` — tracking the saved transcript as the host bridge does (the input's, then each
 * successful `set_transcript`'s). It works on the text: the appended messages keep the exact bytes
 * the guest wrote and the kept ones the bytes they had where they came from, so the result can be
 * compared byte for byte with a loop that sends the whole transcript.
 */
import { expect } from "@effect/vitest"
import type { Answerer, HostCall } from "./harness.js"

/** The texts of the items of the JSON array starting at `text[start]` (`[`), and the index just past its `]`. */
export const arrayItems = (text: string, start: number): { readonly items: Array<string>; readonly end: number } => {
  if (text[start] !== "[") throw new Error(`no JSON array at ${start}: ${text.slice(start, start + 20)}`)
  const items: Array<string> = []
  let depth = 0
  let from = start + 1
  for (let i = start; i < text.length; i++) {
    const c = text[i]
    if (c === "\"") {
      for (i++; text[i] !== "\""; i++) if (text[i] === "\\") i++
    } else if (c === "[" || c === "{") {
      depth++
    } else if (c === "]" || c === "}") {
      depth--
      if (depth === 0) {
        if (i > from) items.push(text.slice(from, i))
        return { items, end: i + 1 }
      }
    } else if (c === "," && depth === 1) {
      items.push(text.slice(from, i))
      from = i + 1
    }
  }
  throw new Error("the JSON array does not end")
}

const MODEL_CONTEXT = `{"context":`
const SET_DELTA = /^\{"keep":(\d+),"append":/
const RIDING_MODEL = `{"transcript":`
const RIDING_DISPATCH = `,"transcript":`

/** An answerer that also remembers its answers, in call order. */
export const remembering = (answer: Answerer): { readonly answer: Answerer; readonly answers: Array<unknown> } => {
  const answers: Array<unknown> = []
  return { answers, answer: (op, request) => {
    const reply = answer(op, request)
    answers.push(reply)
    return reply
  } }
}

const succeeded = (reply: unknown) => typeof reply === "object" && reply !== null && "ok" in reply

/**
 * `calls` as the host sees them, given the activation's saved transcript and each call's answer.
 * A delta whose `keep` is out of range fails the test (the host would refuse it).
 */
export const expandDeltas = (transcript: ReadonlyArray<unknown>, calls: ReadonlyArray<HostCall>, answers: ReadonlyArray<unknown>): Array<HostCall> => {
  let saved = transcript.map((m) => JSON.stringify(m))
  /** The `{"keep", "append"}` at `request[start]`, expanded against `base`: its messages and the index just past its `}`. */
  const delta = (request: string, start: number, base: ReadonlyArray<string>, n: number, what: string) => {
    const match = SET_DELTA.exec(request.slice(start))
    expect(match, `call ${n}: ${what} is a delta`).not.toBeNull()
    const keep = Number(match![1])
    expect(keep, `call ${n}: ${what} keeps at most the saved transcript (${base.length})`).toBeLessThanOrEqual(base.length)
    const { items, end } = arrayItems(request, start + match![0].length)
    expect(request[end], `call ${n}: ${what} is well formed`).toBe("}")
    return { messages: [...base.slice(0, keep), ...items], end: end + 1 }
  }
  return calls.map((call, n) => {
    // A save riding on a call (docs/abi.md): `{"transcript": delta, "context": delta, …}` on model,
    // `{"calls": [...], "transcript": delta}` on dispatch; the context counts from the saved one.
    if (call.op === "model" && call.request.startsWith(RIDING_MODEL)) {
      const save = delta(call.request, RIDING_MODEL.length, saved, n, "the saved transcript")
      expect(call.request.startsWith(`,"context":`, save.end), `call ${n}: the context follows the save`).toBe(true)
      const context = delta(call.request, save.end + `,"context":`.length, save.messages, n, "the context")
      if (succeeded(answers[n])) saved = save.messages
      return { op: call.op, request: `{"transcript":{"messages":[${save.messages.join(",")}]},"messages":[${context.messages.join(",")}]${call.request.slice(context.end)}` }
    }
    if (call.op === "dispatch" && call.request.startsWith(`{"calls":`)) {
      const calls = valueEnd(call.request, `{"calls":`.length)
      if (call.request.startsWith(RIDING_DISPATCH, calls)) {
        const save = delta(call.request, calls + RIDING_DISPATCH.length, saved, n, "the saved transcript")
        expect(call.request.slice(save.end), `call ${n}: the save is the request's last field`).toBe("}")
        if (succeeded(answers[n])) saved = save.messages
        return { op: call.op, request: `${call.request.slice(0, calls)},"transcript":{"messages":[${save.messages.join(",")}]}}` }
      }
    }
    if (call.op === "model" && call.request.startsWith(MODEL_CONTEXT)) {
      const context = delta(call.request, MODEL_CONTEXT.length, saved, n, "the context")
      return { op: call.op, request: `{"messages":[${context.messages.join(",")}]${call.request.slice(context.end)}` }
    }
    if (call.op === "set_transcript" && SET_DELTA.test(call.request)) {
      const save = delta(call.request, 0, saved, n, "the save")
      expect(call.request.slice(save.end), `call ${n}: the save is the whole request`).toBe("")
      if (succeeded(answers[n])) saved = save.messages
      return { op: call.op, request: `{"messages":[${save.messages.join(",")}]}` }
    }
    return call
  })
}

/** The index just past the JSON value starting at `text[start]`. */
const valueEnd = (text: string, start: number): number => {
  const c = text[start]
  if (c === "\"") {
    let i = start + 1
    for (; text[i] !== "\""; i++) if (text[i] === "\\") i++
    return i + 1
  }
  if (c === "[" || c === "{") {
    let depth = 0
    for (let i = start; i < text.length; i++) {
      const d = text[i]
      if (d === "\"") i = valueEnd(text, i) - 1
      else if (d === "[" || d === "{") depth++
      else if ((d === "]" || d === "}") && --depth === 0) return i + 1
    }
    throw new Error("the JSON value does not end")
  }
  let i = start
  while (i < text.length && !",]}".includes(text[i]!)) i++
  return i
}

const OUTPUT_OK = `{"ok":`
const OUTPUT_TRANSCRIPT = `,"transcript":`

/**
 * A loop's output as the host takes it (docs/abi.md, "The entries"): `{"ok": value, "transcript":
 * request}` is the `set_transcript` call `request` — appended to `calls`, answered by `answer` and
 * its answer to `answers` — then `{"ok": value}` when that answer is ok, else the error passed on
 * as the official loop passes on a host error (`{"error": {code, message, retryable, ambiguous, details?}}`). Any other output
 * comes back as it was. The texts stay the guest's bytes.
 */
export const outputSave = (
  output: string | undefined,
  calls: ReadonlyArray<HostCall>,
  answers: ReadonlyArray<unknown>,
  answer: Answerer
): { readonly output: string | undefined; readonly calls: ReadonlyArray<HostCall>; readonly answers: ReadonlyArray<unknown> } => {
  if (output === undefined || !output.startsWith(OUTPUT_OK)) return { output, calls, answers }
  const end = valueEnd(output, OUTPUT_OK.length)
  if (!output.startsWith(OUTPUT_TRANSCRIPT, end)) return { output, calls, answers }
  const request = output.slice(end + OUTPUT_TRANSCRIPT.length, valueEnd(output, end + OUTPUT_TRANSCRIPT.length))
  expect(output.length, "the transcript is the output's last field").toBe(end + OUTPUT_TRANSCRIPT.length + request.length + 1)
  const reply = answer("set_transcript", JSON.parse(request)) as { error?: { code: string; message: string; retryable: boolean; ambiguous: boolean; details?: unknown } }
  const saved = succeeded(reply)
  return {
    output: saved ? `${output.slice(0, end)}}` : JSON.stringify({ error: { code: reply.error!.code, message: reply.error!.message, retryable: reply.error!.retryable, ambiguous: reply.error!.ambiguous, ...(reply.error!.details !== undefined ? { details: reply.error!.details } : {}) } }),
    calls: [...calls, { op: "set_transcript", request }],
    answers: [...answers, reply]
  }
}
