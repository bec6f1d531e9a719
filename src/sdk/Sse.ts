/**
 * A reader of `text/event-stream` bodies (the WHATWG "server-sent events" parsing rules): lines
 * end at CR, LF or CRLF; a blank line dispatches the frame gathered so far; `:` lines are
 * comments; a frame cut off by the end of the stream is dropped. Only web APIs
 * (ReadableStream, TextDecoder), so it runs wherever fetch does.
 */

export interface SseFrame {
  /** The frame's own `id:` (not carried over from earlier frames, unlike EventSource): Brain gives
   * one to recorded Events only, so a frame without is a delta or a control frame. */
  readonly id: string | undefined
  /** The frame's `event:` (undefined means `message`). */
  readonly event: string | undefined
  readonly data: string
}

export async function* sseFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<SseFrame> {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  let buffer = ""
  let id: string | undefined
  let event: string | undefined
  let data: Array<string> = []
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      buffer += decoder.decode(value, { stream: true })
      for (;;) {
        const end = buffer.search(/[\r\n]/)
        if (end < 0) break
        // A CR at the end of what has arrived may be the first half of a CRLF: wait for more.
        if (buffer[end] === "\r" && end === buffer.length - 1) break
        const line = buffer.slice(0, end)
        buffer = buffer.slice(buffer[end] === "\r" && buffer[end + 1] === "\n" ? end + 2 : end + 1)
        if (line.length === 0) {
          if (data.length > 0) yield { id, event, data: data.join("\n") }
          id = undefined
          event = undefined
          data = []
          continue
        }
        if (line.startsWith(":")) continue
        const colon = line.indexOf(":")
        const field = colon < 0 ? line : line.slice(0, colon)
        const raw = colon < 0 ? "" : line.slice(colon + 1)
        const value = raw.startsWith(" ") ? raw.slice(1) : raw
        if (field === "data") data.push(value)
        else if (field === "event") event = value
        else if (field === "id" && !value.includes("\0")) id = value
      }
    }
  } finally {
    // Stops the download when the reader leaves early (a break, an abort, a close).
    await reader.cancel().catch(() => undefined)
  }
}
