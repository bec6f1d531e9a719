/**
 * A reader of `text/event-stream` bodies over the shared parser (domain/SseParser.ts: the WHATWG
 * rules, linear however the bytes are split, so a catch-up of megabytes of frames costs what it
 * weighs). A frame cut off by the end of the stream is dropped. Only web APIs (ReadableStream,
 * TextDecoder), so it runs wherever fetch does.
 */
import { makeSseParser } from "../domain/SseParser.js"

export interface SseFrame {
  /** The frame's own `id:` (not carried over from earlier frames, unlike EventSource): Brain gives
   * one to recorded Events only, so a frame without is a delta or a control frame. */
  readonly id: string | undefined
  /** The frame's `event:` (undefined means `message`). */
  readonly event: string | undefined
  readonly data: string
}

/** `onBytes` is told of every chunk read, comments (heartbeats) included: what an idle watch needs. */
export async function* sseFrames(body: ReadableStream<Uint8Array>, onBytes?: () => void): AsyncGenerator<SseFrame> {
  for await (const frames of sseReads(body, onBytes)) yield* frames
}

/**
 * The frames of each read of `body`, one array per read that completed any (in order): what a
 * reader needs to see a frame beside the ones that came with it (a call and its cancel, written
 * together and read together, say) before it acts on any of them.
 */
export async function* sseReads(body: ReadableStream<Uint8Array>, onBytes?: () => void): AsyncGenerator<ReadonlyArray<SseFrame>> {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let ready: Array<SseFrame> = []
  const parser = makeSseParser((e, id) => void ready.push({ id, event: e.event, data: e.data }))
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      onBytes?.()
      parser.feed(decoder.decode(value, { stream: true }))
      if (ready.length === 0) continue
      const frames = ready
      ready = []
      yield frames
    }
  } finally {
    // Stops the download when the reader leaves early (a break, an abort, a close).
    await reader.cancel().catch(() => undefined)
  }
}
