/**
 * One client's HTTP: the base URL, the bearer token, the `fetch` it was given, and its lifetime.
 * Every request goes through here, so that `close()` reaches all of them: closing aborts what is
 * in flight and refuses what comes later with `BrainClosed`.
 *
 * Retries: a request whose outcome is uncertain — no answer arrived, or 503 `overloaded` — is sent
 * again, a bounded number of times, with the same method, URL, headers and body, so a mutating
 * request repeats its Idempotency-Key: the server runs it at most once and replays its answer.
 * Any other answer (a 409 `ambiguous` included) is final and becomes a `BrainError`.
 */
import { BrainClosed, BrainError, fromAnswer, isUncertain, networkError } from "./Errors.js"

/** Sends of one request whose outcome is uncertain, the first included: enough to ride out a
 * dropped connection or a short overload, few enough that a dead server is reported quickly. */
export const MAX_ATTEMPTS = 4
/** Milliseconds before the first retry, doubled before each next one (200, 400, 800). */
export const RETRY_BASE_MS = 200

export type Fetch = (input: string, init: RequestInit) => Promise<Response>

export interface TransportOptions {
  /** The server's URL, `http://127.0.0.1:3210` say. */
  readonly baseUrl: string
  /** The `BRAIN_API_TOKEN`, sent as `Authorization: Bearer <token>`. */
  readonly token?: string | undefined
  /** The `fetch` to use (default: the global one). */
  readonly fetch?: Fetch | undefined
}

export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly text: string
}

export interface Call {
  readonly method: "GET" | "POST" | "DELETE"
  readonly path: string
  readonly body?: unknown
  readonly headers?: Readonly<Record<string, string>>
  /** Send it once, never again: for a request the server does not deduplicate (a host's Event). */
  readonly once?: boolean
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
  private readonly fetchFn: Fetch
  readonly baseUrl: string

  constructor(readonly options: TransportOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "")
    const given = options.fetch
    // The global fetch is called through globalThis: browsers refuse it detached from window.
    this.fetchFn = given ?? ((input, init) => globalThis.fetch(input, init))
  }

  get closed(): boolean {
    return this.lifetime.signal.aborted
  }

  /** Aborts everything in flight; later calls reject with BrainClosed. Idempotent. */
  close(): void {
    if (!this.closed) this.lifetime.abort(new BrainClosed())
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
    const sources = signal === undefined ? [this.lifetime.signal] : [this.lifetime.signal, signal]
    const listeners = sources.map((source) => {
      const onAbort = () => controller.abort(source.reason)
      if (source.aborted) controller.abort(source.reason)
      else source.addEventListener("abort", onAbort, { once: true })
      return () => source.removeEventListener("abort", onAbort)
    })
    return { controller, release: () => listeners.forEach((remove) => remove()) }
  }

  /** The headers every request carries. */
  headers(extra: Readonly<Record<string, string>> = {}): Record<string, string> {
    return {
      accept: "application/json",
      ...(this.options.token !== undefined ? { authorization: `Bearer ${this.options.token}` } : {}),
      ...extra
    }
  }

  /** One send, no retry: the response, or the failure (BrainClosed once closed). */
  async open(path: string, init: { readonly method: string; readonly headers: Record<string, string>; readonly body?: string; readonly signal: AbortSignal }): Promise<Response> {
    this.ensureOpen()
    try {
      return await this.fetchFn(`${this.baseUrl}${path}`, init)
    } catch (cause) {
      if (this.closed) throw new BrainClosed()
      if (init.signal.aborted) throw init.signal.reason
      throw networkError(cause)
    }
  }

  /**
   * A request and its whole answer: resolves with a 2xx, rejects with a BrainError for anything
   * else, after retrying an uncertain outcome (see the module comment).
   */
  async request(call: Call, signal?: AbortSignal): Promise<Answer> {
    const body = call.body === undefined ? undefined : JSON.stringify(call.body)
    const headers = this.headers({ ...(body !== undefined ? { "content-type": "application/json" } : {}), ...call.headers })
    for (let attempt = 1;; attempt++) {
      const { controller, release } = this.link(signal)
      let error: BrainError
      try {
        const response = await this.open(call.path, {
          method: call.method,
          headers,
          ...(body !== undefined ? { body } : {}),
          signal: controller.signal
        })
        const text = await response.text().catch((cause) => {
          if (this.closed) throw new BrainClosed()
          if (controller.signal.aborted) throw controller.signal.reason
          throw networkError(cause)
        })
        if (response.ok) return { status: response.status, headers: response.headers, text }
        error = fromAnswer(response.status, text)
      } catch (e) {
        if (!(e instanceof BrainError)) throw e
        error = e
      } finally {
        release()
      }
      if (!isUncertain(error) || attempt >= MAX_ATTEMPTS || call.once === true) throw error
      const { controller: waiting, release: stopWaiting } = this.link(signal)
      try {
        await sleep(RETRY_BASE_MS * 2 ** (attempt - 1), waiting.signal)
      } finally {
        stopWaiting()
      }
    }
  }

  /** `request`, and its body parsed as JSON (undefined for an empty body). */
  async json<A>(call: Call, signal?: AbortSignal): Promise<A> {
    const answer = await this.request(call, signal)
    if (answer.text.length === 0) return undefined as A
    try {
      return JSON.parse(answer.text) as A
    } catch {
      throw fromAnswer(answer.status, answer.text)
    }
  }
}
