/**
 * A Server-Sent Events parser (the WHATWG "event stream interpretation"), for model streams and
 * for the SDK's Event streams: lines end with CRLF, LF or CR; a blank line dispatches the event;
 * `data:` lines join with a line feed; `event:` names it; one space after the colon is dropped;
 * `:` lines are comments. `onEvent`'s second argument is the event's own `id:` field, not carried over from earlier
 * events as EventSource does (Brain gives one to recorded Events only, so an event without one is
 * a delta or a control frame; a model stream ignores it). `retry:` is ignored: neither reader
 * lets the server tell it when to reconnect. An event cut off by the end of the stream is never
 * dispatched.
 *
 * Linear in what it is fed, however the bytes are split: a model answer can arrive as one chunk
 * of hundreds of events, and an SSE catch-up as megabytes of them. (The parser of
 * @effect/experimental 0.61 rescans its buffer from the start for every line of a chunk, so one
 * such chunk cost tens of milliseconds.) Strings only: it runs wherever the SDK does.
 */

export interface ParsedEvent {
  /** The `event:` field, when the event had one. */
  readonly event: string | undefined
  readonly data: string
}

export interface SseParser {
  /** Feeds decoded text; calls `onEvent` for each event completed by it. Returns false once an event grew past the maximum. */
  readonly feed: (text: string) => boolean
}

/** `id`: the event's own `id:` field, when it had one (without a NUL, as the standard requires). */
export const makeSseParser = (onEvent: (event: ParsedEvent, id: string | undefined) => void, maxEventBytes = 0): SseParser => {
  /** The unfinished last line of what was fed so far. */
  let partial = ""
  /** A CR ended the previous feed: a LF starting this one belongs to it. */
  let afterCr = false
  let data: Array<string> = []
  let dataLength = 0
  let event: string | undefined
  let id: string | undefined

  const line = (text: string) => {
    if (text.length === 0) {
      if (data.length > 0) onEvent({ event, data: data.join("\n") }, id)
      data = []
      dataLength = 0
      event = undefined
      id = undefined
      return true
    }
    if (text.charCodeAt(0) === 58 /* : */) return true
    const colon = text.indexOf(":")
    const field = colon < 0 ? text : text.slice(0, colon)
    let value = colon < 0 ? "" : text.slice(colon + 1)
    if (value.charCodeAt(0) === 32 /* space */) value = value.slice(1)
    if (field === "data") {
      data.push(value)
      dataLength += value.length + 1
      return maxEventBytes <= 0 || dataLength <= maxEventBytes
    }
    if (field === "event") event = value
    else if (field === "id" && !value.includes("\0")) id = value
    return true
  }

  const feed = (text: string): boolean => {
    let start = 0
    let i = 0
    if (afterCr && text.charCodeAt(0) === 10) start = i = 1
    afterCr = false
    const n = text.length
    while (i < n) {
      const c = text.charCodeAt(i)
      if (c !== 10 && c !== 13) {
        i++
        continue
      }
      const whole = partial.length > 0 ? partial + text.slice(start, i) : text.slice(start, i)
      partial = ""
      if (!line(whole)) return false
      if (c === 13) {
        if (i + 1 < n) {
          if (text.charCodeAt(i + 1) === 10) i++
        } else afterCr = true
      }
      start = ++i
    }
    if (start < n) {
      partial += text.slice(start)
      if (maxEventBytes > 0 && partial.length + dataLength > maxEventBytes) return false
    }
    return true
  }

  return { feed }
}
