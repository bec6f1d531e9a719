/**
 * An answer that cannot be encoded is the server's fault (500 `internal`), never the request's
 * (docs/api.md, Errors); and a transcript the session legally holds is always readable: its
 * answer is written piece by piece, never made into one string, so a transcript whose JSON passes
 * V8's maximum string length (about 2^29 characters) is answered whole. Over the real routes,
 * handlers and error shaping, with Sessions a stand-in.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServer from "@effect/platform/HttpServer"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Admission, apiLive } from "../../src/http/Handlers.js"
import { answerEncodeFailed, shapeError } from "../../src/http/ErrorShape.js"
import { Transcript } from "../../src/http/Schemas.js"
import { jsonCharsAtMost, PIECE_CHARS, transcriptPieces, transcriptWeight } from "../../src/http/TranscriptAnswer.js"
import { Agentloops } from "../../src/services/Agentloop.js"
import { Hosts } from "../../src/services/Hosts.js"
import { Idempotency } from "../../src/services/Idempotency.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions, type SessionsShape } from "../../src/services/Sessions.js"

const ID = "ses_01jdq0000000000000000000ab"

/** A service no route under test calls: any use of it is a defect. */
const untouched = <S>() => new Proxy({}, { get: () => () => Effect.die("not called") }) as S

const handlerFor = (sessions: Partial<SessionsShape>) =>
  HttpApiBuilder.toWebHandler(
    Layer.mergeAll(
      apiLive(new Admission()).pipe(
        Layer.provide(Layer.mergeAll(
          Layer.succeed(Sessions, sessions as SessionsShape),
          Layer.succeed(Idempotency, untouched()),
          Layer.succeed(Agentloops, untouched()),
          Layer.succeed(Hosts, untouched()),
          ServerConfig.layerWith({})
        ))
      ),
      // The server's own error shaping (the gate's last step).
      HttpApiBuilder.middleware((app) => Effect.catchAllCause(app, shapeError)),
      HttpServer.layerContext
    )
  )

describe("an answer that cannot be encoded", () => {
  it("is 500 internal, not the request's 400: a summary off the contract; a malformed id is still 400", async () => {
    const { handler, dispose } = handlerFor({
      get: () => Effect.succeed({ session_id: ID, status: "bogus", last_sequence: -1.5 } as never)
    })
    try {
      const answer = await handler(new Request(`http://brain/v1/sessions/${ID}`))
      expect(answer.status).toBe(500)
      const body = await answer.json() as { code: string; message: string; retryable: boolean }
      expect(body.code).toBe("internal")
      expect(body.message).toContain("could not encode its answer")
      const malformed = await handler(new Request("http://brain/v1/sessions/not-an-id"))
      expect(malformed.status).toBe(400)
      expect((await malformed.json() as { code: string }).code).toBe("invalid_request")
    } finally {
      await dispose()
    }
  })

  it("is told from a request that does not decode by the platform's message alone", () => {
    expect(answerEncodeFailed("(<declaration schema> <-> Transcript)\n└─ Transformation process failure\n   └─ Could not encode to JSON")).toBe(true)
    expect(answerEncodeFailed("{ readonly id: SessionId }\n└─ [\"id\"]\n   └─ Expected SessionId")).toBe(false)
    expect(answerEncodeFailed(undefined)).toBe(false)
  })
})

describe("the transcript's answer", () => {
  const message = (i: number) =>
    i % 3 === 0
      ? { role: "user" as const, content: `é\u0001 ${"x".repeat(i * 997)}` }
      : i % 3 === 1
      ? { role: "assistant" as const, content: "", tool_calls: [{ id: `c${i}`, name: "t", input: { n: i } }] }
      : { role: "tool" as const, content: [{ type: "text", text: "r".repeat(i * 3001) }], tool_call_id: `c${i - 1}` }

  it("is the contract's JSON of {messages, through_sequence}, in pieces of about PIECE_CHARS: empty, small and many-piece transcripts", () => {
    for (const count of [0, 1, 5, 400]) {
      const transcript = { messages: Array.from({ length: count }, (_, i) => message(i)), through_sequence: 7 }
      const pieces = [...transcriptPieces(transcript)]
      expect(pieces.join(""), `${count} messages`).toBe(JSON.stringify(Schema.encodeSync(Transcript)(transcript)))
      const longest = Math.max(...transcript.messages.map((m) => JSON.stringify(m).length), 0)
      for (const piece of pieces) expect(piece.length).toBeLessThan(PIECE_CHARS + longest + 64)
      if (count === 400) expect(pieces.length).toBeGreaterThan(10)
      // The bound that chooses one string or pieces is never below the JSON.
      expect(jsonCharsAtMost(transcript, Infinity)).toBeGreaterThanOrEqual(pieces.join("").length)
    }
  })

  it("a message far larger than a piece is written in parts: no piece passes 2.5 PIECE_CHARS, surrogate pairs and escapes kept whole", () => {
    const huge = `${"😀".repeat(PIECE_CHARS)}\u0001"\\${"é".repeat(3 * PIECE_CHARS + 1)}`
    const transcript = {
      messages: [
        { role: "user" as const, content: huge },
        { role: "tool" as const, content: [{ type: "text", text: "\u0002".repeat(PIECE_CHARS) }], tool_call_id: "c1" },
        { role: "assistant" as const, content: "ok", tool_calls: [{ id: "c2", name: "t", input: { big: "z".repeat(2 * PIECE_CHARS) } }] }
      ],
      through_sequence: 9
    }
    const pieces = [...transcriptPieces(transcript)]
    expect(pieces.join("")).toBe(JSON.stringify(Schema.encodeSync(Transcript)(transcript)))
    for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(2.5 * PIECE_CHARS)
    expect(pieces.length).toBeGreaterThan(10)
  })

  it("weighs an answer by its transcript's characters and one encoded piece", () => {
    const messages = [{ role: "user" as const, content: "x".repeat(1_000_000) }, { role: "assistant" as const, content: "y".repeat(500_000) }]
    const weight = transcriptWeight(messages)
    expect(weight).toBeGreaterThanOrEqual(1_500_000 + 3 * PIECE_CHARS)
    expect(weight).toBeLessThan(1_500_000 + 3 * PIECE_CHARS + 1024)
  })

  it("a small transcript is answered whole, with its length", async () => {
    const transcript = { messages: [message(0), message(1)], through_sequence: 3 }
    const { handler, dispose } = handlerFor({ transcript: () => Effect.succeed(transcript) as never })
    try {
      const answer = await handler(new Request(`http://brain/v1/sessions/${ID}/transcript`))
      expect(answer.status).toBe(200)
      expect(answer.headers.get("content-type")).toBe("application/json")
      const text = await answer.text()
      expect(answer.headers.get("content-length")).toBe(String(Buffer.byteLength(text)))
      expect(JSON.parse(text)).toEqual(transcript)
    } finally {
      await dispose()
    }
  })

  it("whose JSON passes V8's maximum string length is answered 200 in full (587 MB of JSON from 98 MB held)", async () => {
    // 140 messages sharing one string of 699,049 characters that JSON escapes as six each: 4 MiB a message.
    const escaped = "\u0001".repeat(699_049)
    const messages = Array.from({ length: 140 }, () => ({ role: "user" as const, content: escaped }))
    const { handler, dispose } = handlerFor({ transcript: () => Effect.succeed({ messages, through_sequence: 492 }) as never })
    try {
      const answer = await handler(new Request(`http://brain/v1/sessions/${ID}/transcript`))
      expect(answer.status).toBe(200)
      expect(answer.headers.get("content-type")).toBe("application/json")
      const reader = answer.body!.getReader()
      const decoder = new TextDecoder()
      let bytes = 0
      let head = ""
      let tail = ""
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        bytes += value.byteLength
        const text = decoder.decode(value, { stream: true })
        if (head.length < 64) head += text.slice(0, 64)
        tail = (tail + text).slice(-64)
      }
      const oneMessage = JSON.stringify(messages[0]).length
      expect(bytes).toBe("{\"messages\":[".length + 140 * oneMessage + 139 + "],\"through_sequence\":492}".length)
      expect(bytes).toBeGreaterThan(2 ** 29)
      expect(head.startsWith("{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0001")).toBe(true)
      expect(tail.endsWith("\\u0001\"}],\"through_sequence\":492}")).toBe(true)
    } finally {
      await dispose()
    }
  }, 120_000)
})
