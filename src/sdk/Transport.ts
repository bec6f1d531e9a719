/**
 * One Promise client's way to its server, and its lifetime. Every call goes through here, so that
 * `close()` reaches all of them: closing aborts what is in flight and refuses what comes later
 * with `BrainClosed`.
 *
 * - Request/response calls go through the Effect client (`BrainClient`, BrainClient.ts) of this
 *   client's base URL and token, run on this client's own runtime over the `fetch` it was given
 *   (`FetchHttpClient.Fetch`): the contract, the encoding and decoding, the Idempotency-Keys, the
 *   retries of uncertain outcomes and the typed refusals all come from there. A typed refusal
 *   reaches the Promise caller as the `BrainError` of its answer (`fromRefusal`).
 * - The SSE streams — a session's live Events (Events.ts) and a host's command stream (Host.ts) —
 *   are read with that same `fetch` directly (`open`): they are long-lived bodies read frame by
 *   frame, with their own reconnection rules, which a request/response call of `HttpApiClient`
 *   does not express.
 */
import * as FetchHttpClient from "@effect/platform/FetchHttpClient"
import * as HttpClient from "@effect/platform/HttpClient"
import { Cause, Effect, Exit, Layer, ManagedRuntime, Option } from "effect"
import type { ApiError } from "../domain/Errors.js"
import { BrainClient, type BrainClientShape } from "./BrainClient.js"
import { BrainClosed, BrainError, fromRefusal, networkError } from "./Errors.js"

export type Fetch = (input: string, init: RequestInit) => Promise<Response>

export interface TransportOptions {
  /** The server's URL, `http://127.0.0.1:3210` say. */
  readonly baseUrl: string
  /** The `BRAIN_API_TOKEN`, sent as `Authorization: Bearer <token>`. */
  readonly token?: string | undefined
  /** The `fetch` to use (default: the global one). */
  readonly fetch?: Fetch | undefined
}

/** Resolves after `ms`, or rejects with `signal`'s reason when it aborts first. */
export const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const onAbort = () => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort)
      resolve()
    }, ms)
    signal.addEventListener("abort", onAbort, { once: true })
  })

export class Transport {
  private readonly lifetime = new AbortController()
  /** The controllers of the calls and streams in flight (`link`): closing the client aborts each. */
  private readonly live = new Set<AbortController>()
  private readonly fetchFn: Fetch
  private readonly runtime: ManagedRuntime.ManagedRuntime<BrainClient, never>
  readonly baseUrl: string

  constructor(readonly options: TransportOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "")
    const given = options.fetch
    // The global fetch is called through globalThis: browsers refuse it detached from window.
    const fetchFn: Fetch = given ?? ((input, init) => globalThis.fetch(input, init))
    this.fetchFn = fetchFn
    // FetchHttpClient calls fetch with a URL; this client's `fetch` takes the URL's text.
    const asFetch = ((input: string | URL | { readonly url: string }, init?: RequestInit) =>
      fetchFn(input instanceof URL ? input.href : typeof input === "string" ? input : input.url, init ?? {})) as typeof globalThis.fetch
    this.runtime = ManagedRuntime.make(
      Layer.merge(
        BrainClient.layerFetch({ baseUrl: this.baseUrl, token: options.token }),
        // Read by FetchHttpClient from each request's context, which the runtime's holds.
        Layer.succeed(FetchHttpClient.Fetch, asFetch)
      )
    )
  }

  get closed(): boolean {
    return this.lifetime.signal.aborted
  }

  /** Aborts everything in flight; later calls reject with BrainClosed. Idempotent. */
  close(): void {
    if (this.closed) return
    this.lifetime.abort(new BrainClosed())
    for (const controller of this.live) controller.abort(this.lifetime.signal.reason)
    this.live.clear()
    void this.runtime.dispose()
  }

  ensureOpen(): void {
    if (this.closed) throw new BrainClosed()
  }

  /**
   * A controller that aborts when the client closes or `signal` aborts; `release` detaches it
   * from both (call it when its request is done, so long-lived signals do not collect listeners).
   */
  link(signal?: AbortSignal): { readonly controller: AbortController; readonly release: () => void } {
    const controller = new AbortController()
    // The client's own end is reached through `live`, not a listener on a client-wide signal per
    // call: a server application's many calls in flight would collect them (and Node would warn).
    if (this.closed) controller.abort(this.lifetime.signal.reason)
    else this.live.add(controller)
    let detach = () => {}
    if (signal !== undefined) {
      const onAbort = () => controller.abort(signal.reason)
      if (signal.aborted) controller.abort(signal.reason)
      else {
        signal.addEventListener("abort", onAbort, { once: true })
        detach = () => signal.removeEventListener("abort", onAbort)
      }
    }
    return {
      controller,
      release: () => {
        this.live.delete(controller)
        detach()
      }
    }
  }

  /**
   * A call of the Effect client, as a Promise: its answer; its refusal as a BrainError; BrainClosed
   * once the client closes, or `signal`'s reason once it aborts (either interrupts the call, which
   * aborts its request).
   */
  async call<A>(call: (client: BrainClientShape) => Effect.Effect<A, ApiError | BrainError>, signal?: AbortSignal): Promise<A> {
    this.ensureOpen()
    const { controller, release } = this.link(signal)
    try {
      const exit = await this.runtime.runPromiseExit(
        // No trace headers: the Promise client sends only what the contract names.
        Effect.flatMap(BrainClient, call).pipe(Effect.locally(HttpClient.currentTracerPropagation, false)),
        { signal: controller.signal }
      )
      if (Exit.isSuccess(exit)) return exit.value
      if (this.closed) throw new BrainClosed()
      if (controller.signal.aborted) throw controller.signal.reason
      const failure = Cause.failureOption(exit.cause)
      if (Option.isNone(failure)) throw Cause.squash(exit.cause)
      throw failure.value instanceof BrainError ? failure.value : fromRefusal(failure.value)
    } finally {
      release()
    }
  }

  /** The headers a stream request carries. */
  headers(extra: Readonly<Record<string, string>> = {}): Record<string, string> {
    return {
      ...(this.options.token !== undefined ? { authorization: `Bearer ${this.options.token}` } : {}),
      ...extra
    }
  }

  /** Opens a stream (`GET path`, once, no retry): the response, or the failure (BrainClosed once closed). */
  async open(path: string, init: { readonly headers: Record<string, string>; readonly signal: AbortSignal }): Promise<Response> {
    this.ensureOpen()
    try {
      return await this.fetchFn(`${this.baseUrl}${path}`, { method: "GET", headers: init.headers, signal: init.signal })
    } catch (cause) {
      if (this.closed) throw new BrainClosed()
      if (init.signal.aborted) throw init.signal.reason
      throw networkError(cause)
    }
  }
}
