/**
 * The SSE parser of model streams: every split of the same text gives the same events (line ends
 * CRLF, LF and CR, comments, multi-line data, the optional space after the colon), `retry:` and
 * `id:` change nothing, and an event past the maximum stops the parse.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { makeSseParser, type ParsedEvent } from "../../src/domain/SseParser.js"

const parse = (chunks: ReadonlyArray<string>, max = 0) => {
  const events: Array<ParsedEvent> = []
  const parser = makeSseParser((e) => events.push(e), max)
  const fits = chunks.every((c) => parser.feed(c))
  return { events, fits }
}

const splitAt = (text: string, cuts: ReadonlyArray<number>) => {
  const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b)
  const out: Array<string> = []
  let from = 0
  for (const p of points) {
    out.push(text.slice(from, p))
    from = p
  }
  out.push(text.slice(from))
  return out
}

describe("the SSE parser", () => {
  it("reads the WHATWG forms: named and unnamed events, multi-line data, comments, one optional space, retry and id ignored", () => {
    const text = ": comment\nevent: a\ndata: one\ndata:two\n\ndata:  spaced\r\n\r\nretry: 10\nid: 7\ndata\n\nevent: b\rdata: x\r\r: only a comment\n\n"
    expect(parse([text]).events).toEqual([
      { event: "a", data: "one\ntwo" },
      { event: undefined, data: " spaced" },
      { event: undefined, data: "" },
      { event: "b", data: "x" }
    ])
  })

  it("any split of the text gives the same events as the whole", () => {
    const field = fc.constantFrom("data: {\"a\":1}", "data: [DONE]", "event: delta", ": ping", "data:x", "id: 3", "retry: 5", "data: é ü 漢")
    const ending = fc.constantFrom("\n", "\r\n", "\r")
    const stream = fc.array(fc.tuple(fc.array(fc.tuple(field, ending), { maxLength: 4 }), ending), { maxLength: 12 }).map((events) =>
      events.map(([lines, end]) => lines.map(([l, e]) => l + e).join("") + end).join("")
    )
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 12 }), (text, cuts) => {
        expect(parse(splitAt(text, cuts)).events).toEqual(parse([text]).events)
      }),
      { numRuns: 500 }
    )
  })

  it("an event whose data passes the maximum stops the parse, whole or in pieces", () => {
    const big = `data: ${"x".repeat(100)}\n`
    expect(parse([big.repeat(3) + "\n"], 250).fits).toBe(false)
    expect(parse(big.repeat(3).split(""), 250).fits).toBe(false)
    expect(parse([big + "\n" + big + "\n"], 250)).toEqual({ events: [{ event: undefined, data: "x".repeat(100) }, { event: undefined, data: "x".repeat(100) }], fits: true })
  })

  it("one chunk of 20,000 events (a whole answer at once) gives every event", () => {
    const many = "data: {\"choices\":[{\"delta\":{\"content\":\" tok\"}}]}\n\n".repeat(20_000)
    const { events } = parse([many])
    expect(events).toHaveLength(20_000)
  })
})
