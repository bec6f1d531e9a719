/**
 * A request's body read into memory: charged to the body budget (BodyBudget.ts) as its bytes
 * arrive, refused at the size bound or when the budget is spent, given back when its request is
 * answered; then served from memory to the handlers and decoders.
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { RequestError } from "@effect/platform/HttpServerError"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type { IncomingMessage } from "node:http"
import { Effect, Stream } from "effect"
import type { InvalidRequest } from "../domain/Errors.js"
import type { BodyBudget } from "./BodyBudget.js"
import { whileArriving } from "./Draining.js"
import { invalid } from "./Errors.js"

/** Requests whose body was refused while it arrived, as it passed BRAIN_MAX_REQUEST_BYTES (readBody). */
export const cutShort = new WeakSet<IncomingMessage>()

/** A request's share of the body budget, and how to stop reading its body. */
export interface Held {
  bytes: number
  detach: (() => void) | undefined
}

/**
 * Bodies read before the request reached the gate (SocketRoutes.ts reads a send's or a host's
 * results, then hands the request here when its route does not take it as it is): the gate takes
 * the body from here instead of the socket, and checks and answers it as any other.
 */
export const preRead = new WeakMap<IncomingMessage, Buffer>()

/**
 * Reads the whole body, taking its bytes from the budget as they arrive. Past `max` the body is
 * refused at once: what it held is given back, the answer is undefined (too large) and the
 * connection is closed after it (`cutShort`), so a client streaming a large body learns at the
 * bound rather than after uploading all of it. When the budget cannot take the next bytes, the body
 * is refused "busy": what it held is given back at once, and the rest is read and discarded (the
 * refusal is answered on a live connection, never by resetting it). A slow body holds only the
 * bytes it has sent; the listener's request timeout (Connections.ts) bounds how long it may take.
 * The listeners come off when the body ends or fails, or by `held.detach`, which the gate's
 * finalizer calls: a request interrupted while its body arrives (its connection closed) takes no
 * more of the budget once the finalizer has given back what it held. No canceler of its own, so
 * the wait is a plain `Effect.async`.
 */
export const readBody = (request: HttpServerRequest.HttpServerRequest, max: number, budget: BodyBudget | undefined, held: Held, refusedByDrain: boolean) =>
  Effect.async<Buffer | undefined | "busy" | "drained", InvalidRequest>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const read = preRead.get(source)
    if (read !== undefined) {
      preRead.delete(source)
      if (read.length > max) return resume(Effect.succeed(undefined))
      // Already in memory: its reader gave its bytes back as it handed it over; counted again here.
      budget?.hold(read.length)
      held.bytes += read.length
      return resume(Effect.succeed(read))
    }
    const chunks: Array<Buffer> = []
    let size = 0
    let refused: "tooLarge" | "busy" | "drained" | undefined
    const refuse = (why: "tooLarge" | "busy" | "drained") => {
      refused = why
      chunks.length = 0
      budget?.give(held.bytes)
      held.bytes = 0
    }
    // Refused by a drain: answered now, its bytes given back, the rest read and discarded.
    const unregister = refusedByDrain
      ? whileArriving(() => {
        if (refused === undefined) refuse("drained")
        resume(Effect.succeed("drained"))
      })
      : undefined
    const onData = (chunk: Buffer) => {
      if (refused !== undefined) return
      size += chunk.length
      if (size > max) {
        // Answered now, the connection closed after the answer: the client learns at the bound,
        // not after uploading the rest (docs/api.md 413).
        refuse("tooLarge")
        cutShort.add(source)
        detach()
        return resume(Effect.succeed(undefined))
      }
      if (budget) {
        if (!budget.take(chunk.length, held.bytes)) return refuse("busy")
        held.bytes += chunk.length
      }
      chunks.push(chunk)
    }
    const detach = () => {
      unregister?.()
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    }
    const onEnd = () => {
      detach()
      // A body refused by the drain was answered already.
      if (refused === "drained") return
      resume(Effect.succeed(refused === "tooLarge" ? undefined : refused ?? Buffer.concat(chunks)))
    }
    const onError = (err: Error) => {
      detach()
      if (refused === "drained") return
      resume(Effect.fail(invalid(`the body could not be read: ${err.message}`)))
    }
    if (source.readableEnded) {
      unregister?.()
      return resume(Effect.succeed(Buffer.alloc(0)))
    }
    held.detach = detach
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
  })

/** The request with its body already read: handlers and decoders get it from memory. */
export const withBody = (
  request: HttpServerRequest.HttpServerRequest,
  body: Buffer,
  json?: { readonly parsed: unknown }
): HttpServerRequest.HttpServerRequest => {
  const text = body.toString("utf8")
  return Object.create(request, {
    text: { get: () => Effect.succeed(text) },
    json: {
      get: () =>
        json ? Effect.succeed(json.parsed) : Effect.try({
          try: () => (text === "" ? null : JSON.parse(text)) as unknown,
          catch: (err) => new RequestError({ request, reason: "Decode", cause: err })
        })
    },
    arrayBuffer: {
      get: () => Effect.succeed(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength) as ArrayBuffer)
    },
    stream: { get: () => Stream.succeed(new Uint8Array(body)) },
    // The body was read already: the other decoders are refused rather than left waiting on it.
    urlParamsBody: { get: () => Effect.fail(new RequestError({ request, reason: "Decode", description: "form bodies are not accepted" })) },
    multipart: { get: () => Effect.fail(new RequestError({ request, reason: "Decode", description: "multipart bodies are not accepted" })) },
    multipartStream: { get: () => Stream.fail(new RequestError({ request, reason: "Decode", description: "multipart bodies are not accepted" })) }
  })
}
