/**
 * Calls that are over before the host would start them, against a real server process: the host's
 * reads of its command stream are held (the server has written the frames; they wait, as in a
 * kernel socket buffer, for a host that was slow or paused) and then released. A call whose
 * `cancel` arrives in the same read is never started, nor one cancelled while its input is still
 * being decoded, nor one whose deadline has passed when it arrives: the handler is not invoked,
 * and the stop is confirmed to Brain's cancel. A call that is not over still runs. Everything is asserted with counters and recorded outcomes.
 */
import { Schema } from "effect"
import { describe, expect, it } from "@effect/vitest"
import { Brain, type Event, type Fetch, type StandardSchemaV1, tool, type ToolContext } from "../../src/sdk/index.js"
import type { ServerProcess } from "../support/server.js"
import { gate, history, HostFetch, serverAndClient } from "./support.js"

/** The scripted model calls `name` with `input` once, then answers "done". */
const callsOnce = (name: string, input: unknown) => ({
  model: { provider: "scripted" as const, replies: [{ tool_calls: [{ name, input }] }, { text: "done" }] }
})

const outcomesOf = (events: ReadonlyArray<Event>) => events.filter((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")

interface Frame {
  readonly event: string
  readonly data: string
  /** Characters of the received text up to the end of this frame (its blank line included). */
  readonly end: number
}

/** The whole frames in `text` (comments are frames without an event). */
const framesOf = (text: string): Array<Frame> => {
  const frames: Array<Frame> = []
  let at = 0
  for (;;) {
    const blank = text.indexOf("\n\n", at)
    if (blank < 0) return frames
    const lines = text.slice(at, blank).split("\n")
    frames.push({
      event: lines.find((l) => l.startsWith("event: "))?.slice(7) ?? "",
      data: lines.find((l) => l.startsWith("data: "))?.slice(6) ?? "",
      end: blank + 2
    })
    at = blank + 2
  }
}

/**
 * A fetch whose command stream reaches the SDK only as the test lets it: `hold()` keeps what the
 * server writes from then on, `release(through?)` hands it on as one read (all of it, or up to
 * the end of the first frame `through` accepts), `until(p)` waits for the server to have written
 * frames `p` accepts, and `drained()` waits for the SDK to ask for more once all it was handed
 * has been read.
 */
class HeldCommands {
  private held = false
  /** What the server wrote while held and the SDK has not been handed. */
  private kept = ""
  /** Everything the server wrote on the latest stream. */
  private received = ""
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined
  private reads = 0
  private waiters: Array<() => void> = []

  constructor(private readonly inner: Fetch) {}

  readonly fetch: Fetch = async (url, init) => {
    const response = await this.inner(url, init)
    if (!url.endsWith("/commands") || !response.ok || response.body === null) return response
    const upstream = response.body.getReader()
    const decoder = new TextDecoder()
    this.received = ""
    this.kept = ""
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller
        void (async () => {
          try {
            for (;;) {
              const { done, value } = await upstream.read()
              if (done) return controller.close()
              const text = decoder.decode(value, { stream: true })
              this.received += text
              if (this.held) this.kept += text
              else controller.enqueue(new TextEncoder().encode(text))
              this.wake()
            }
          } catch (e) {
            controller.error(e)
          }
        })()
      },
      pull: () => {
        this.reads++
        this.wake()
      },
      cancel: (reason) => upstream.cancel(reason)
    }, { highWaterMark: 0 })
    return new Response(body, { status: response.status, headers: response.headers })
  }

  hold() {
    this.held = true
  }

  /** Hands on what was kept as one read: all of it, or through the first frame `through` accepts. */
  release(through?: (f: Frame) => boolean) {
    const frame = through === undefined ? undefined : framesOf(this.kept).find(through)
    if (through !== undefined && frame === undefined) throw new Error("no such frame was kept")
    const end = frame?.end ?? this.kept.length
    const part = this.kept.slice(0, end)
    this.kept = this.kept.slice(end)
    if (through === undefined) this.held = false
    this.controller!.enqueue(new TextEncoder().encode(part))
  }

  /** Resolves once the server has written frames that `p` accepts. */
  async until(p: (frames: ReadonlyArray<Frame>) => boolean): Promise<ReadonlyArray<Frame>> {
    while (!p(framesOf(this.received))) await new Promise<void>((resolve) => this.waiters.push(resolve))
    return framesOf(this.received)
  }

  /** Resolves once the SDK has read everything it was handed and asked for more. */
  async drained(): Promise<void> {
    const before = this.reads
    while (this.reads === before) await new Promise<void>((resolve) => this.waiters.push(resolve))
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w()
  }
}

const callFrame = (f: Frame) => f.event === "call"
const cancelFrame = (f: Frame) => f.event === "cancel"
const has = (p: (f: Frame) => boolean) => (frames: ReadonlyArray<Frame>) => frames.some(p)

describe("calls over before the host starts them", () => {
  let server: ServerProcess
  // A grace far beyond what a confirmation takes, so that an unconfirmed stop would show as `unknown`.
  serverAndClient((started) => ({ server } = started), { BRAIN_CANCEL_GRACE_MS: "20000" })

  const client = () => {
    const recording = new HostFetch()
    const held = new HeldCommands(recording.fetch)
    return { recording, held, brain: new Brain({ baseUrl: server.baseUrl, fetch: held.fetch }) }
  }

  /** A tool that counts its runs and stops when its signal aborts. */
  const waiting = (name: string, timeoutMs?: number) => {
    const counter = { runs: 0 }
    const t = tool({
      name,
      input: Schema.Struct({}),
      ...(timeoutMs === undefined ? {} : { timeoutMs }),
      run: (_, ctx: ToolContext) => {
        counter.runs++
        return new Promise<never>((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true }))
      }
    })
    return { tool: t, counter }
  }

  it("a call whose cancel arrives in the same read as the call is never started: its handler is not invoked, and the stop is confirmed (cancelled)", async () => {
    const { recording, held, brain } = client()
    const { tool: wait, counter } = waiting("wait")
    try {
      const session = await brain.sessions.create({ ...callsOnce("wait", {}), tools: [wait] })
      held.hold()
      const receipt = await session.submit("go")
      await held.until(has(callFrame))
      const interrupted = session.interrupt()
      const frames = await held.until(has(cancelFrame))
      held.release()
      await interrupted
      expect(counter.runs).toBe(0)

      const sequence = JSON.parse(frames.find(callFrame)!.data).sequence as number
      expect(recording.resultsFor(session.id, sequence)).toEqual([{ session_id: session.id, sequence, stopped: true }])
      const events = await history(brain, session.id)
      expect(outcomesOf(events).map((e) => e.data)).toEqual([expect.objectContaining({ sequence, outcome: "cancelled" })])
      expect(events.filter((e) => e.kind === "turn_failed")[0]).toMatchObject({ data: { sequence: receipt.sequence } })
    } finally {
      await brain.close()
    }
  })

  it("a call whose deadline has passed when it arrives is never started: its handler is not invoked, and Brain's later cancel is confirmed (timeout, not ambiguous)", async () => {
    const { recording, held, brain } = client()
    const { tool: patient, counter } = waiting("patient", 300)
    try {
      const session = await brain.sessions.create({ ...callsOnce("patient", {}), tools: [patient] })
      held.hold()
      const sent = session.send("go")
      // The server's own deadline passed (it sent its cancel), and so did the one the call names here.
      const frames = await held.until(has(cancelFrame))
      const call = JSON.parse(frames.find(callFrame)!.data) as { readonly sequence: number; readonly deadline_at_ms: number }
      expect(JSON.parse(frames.find(cancelFrame)!.data)).toMatchObject({ sequence: call.sequence, reason: "deadline" })
      while (Date.now() <= call.deadline_at_ms) await new Promise((resolve) => setTimeout(resolve, 10))

      // The call alone, in a read of its own; then the cancel, in the next.
      held.release(callFrame)
      await held.drained()
      held.release()
      expect((await sent).turn.status).toBe("ended")
      expect(counter.runs).toBe(0)

      expect(recording.resultsFor(session.id, call.sequence)).toEqual([{ session_id: session.id, sequence: call.sequence, stopped: true }])
      const outcomes = outcomesOf(await history(brain, session.id))
      expect(outcomes.map((e) => e.data)).toEqual([expect.objectContaining({ sequence: call.sequence, outcome: "timeout" })])
      expect((outcomes[0]!.data as { failure: { ambiguous?: boolean } }).failure.ambiguous ?? false).toBe(false)
    } finally {
      await brain.close()
    }
  })

  it("a call cancelled while its input is still being decoded is never started: its handler is not invoked, and the stop is confirmed (cancelled)", async () => {
    const { recording, held, brain } = client()
    const decoding = gate()
    const decoded = gate()
    let runs = 0
    // A Standard Schema validator that answers only when the test lets it.
    const slowInput: StandardSchemaV1<{ n: number }, { n: number }> = {
      "~standard": {
        version: 1,
        vendor: "test",
        validate: async (v) => {
          decoding.open()
          await decoded.promise
          return { value: v as { n: number } }
        }
      }
    }
    const slow = tool({ name: "slow", input: slowInput, inputSchema: { type: "object" }, run: () => {
      runs++
      return "ran"
    } })
    try {
      const session = await brain.sessions.create({ ...callsOnce("slow", { n: 1 }), tools: [slow] })
      const receipt = await session.submit("go")
      await decoding.promise
      held.hold()
      const interrupted = session.interrupt()
      const frames = await held.until(has(cancelFrame))
      held.release()
      await held.drained()
      decoded.open()
      await interrupted
      expect(runs).toBe(0)

      const sequence = JSON.parse(frames.find(callFrame)!.data).sequence as number
      expect(recording.resultsFor(session.id, sequence)).toEqual([{ session_id: session.id, sequence, stopped: true }])
      const events = await history(brain, session.id)
      expect(outcomesOf(events).map((e) => e.data)).toEqual([expect.objectContaining({ sequence, outcome: "cancelled" })])
      expect(events.filter((e) => e.kind === "turn_failed")[0]).toMatchObject({ data: { sequence: receipt.sequence } })
    } finally {
      await brain.close()
    }
  })

  it("a call that is not over when its held read is released still runs, once, and its output is recorded", async () => {
    const { held, brain } = client()
    let runs = 0
    const echo = tool({ name: "echo", input: Schema.Struct({ q: Schema.Number }), run: ({ q }) => {
      runs++
      return { q }
    } })
    try {
      const session = await brain.sessions.create({ ...callsOnce("echo", { q: 7 }), tools: [echo] })
      held.hold()
      const sent = session.send("go")
      await held.until(has(callFrame))
      held.release()
      expect((await sent).turn.status).toBe("ended")
      expect(runs).toBe(1)
      expect(outcomesOf(await history(brain, session.id)).map((e) => e.data)).toEqual([
        expect.objectContaining({ outcome: "ok", output: { q: 7 } })
      ])
    } finally {
      await brain.close()
    }
  })
})
