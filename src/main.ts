/**
 * The composition root: wires the layers (through Composition.ts, which the tests build from
 * too) and the HTTP server. The CLI (`brain serve`) and `npm start` call `serve`. Nothing else
 * sits above both layers/ and http/.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import { Clock, Context, Data, Deferred, Duration, Effect, Layer, Option, Redacted, Runtime } from "effect"
import { sessionServices } from "./Composition.js"
import { DIST_ROOT } from "./DistRoot.js"
import { MIN_REDACTED_KEY_CHARS, OPEN_JOURNAL_FILES } from "./domain/Limits.js"
import * as AgentloopsModules from "./layers/AgentloopsModules.js"
import { fileStore } from "./layers/agentloops/ModuleStore.js"
import * as WasmHostWorkers from "./layers/WasmHostWorkers.js"
import * as CheckpointStore from "./layers/CheckpointStore.js"
import * as EnvironmentBindingsConfig from "./layers/EnvironmentBindingsConfig.js"
import * as EnvironmentsHost from "./layers/EnvironmentsHost.js"
import * as EnvironmentsHttp from "./layers/EnvironmentsHttp.js"
import * as HostsFile from "./layers/HostsFile.js"
import * as IdempotencyFile from "./layers/IdempotencyFile.js"
import * as JournalFile from "./layers/JournalFile.js"
import { inflightBodyBytes, listedSessions, memoryBudget, moduleCacheBytes } from "./layers/MemoryBudget.js"
import * as ModelBindingsConfig from "./layers/ModelBindingsConfig.js"
import * as ModelsBound from "./layers/ModelsBound.js"
import { anthropic } from "./layers/models/Anthropic.js"
import { openAiChat } from "./layers/models/OpenAiChat.js"
import { openAiResponses } from "./layers/models/OpenAiResponses.js"
import * as TelemetryFile from "./layers/TelemetryFile.js"
import * as TelemetryNone from "./layers/TelemetryNone.js"
import * as TelemetryOtlp from "./layers/TelemetryOtlp.js"
import type { ToolHandler } from "./layers/ToolsInProcess.js"
import * as FileDriver from "./layers/journal/FileDriver.js"
import {
  CLOSED_BY,
  closingWhen,
  TIMEOUT_CHECK_MS,
  type ConnectionGuard,
  fitToFileLimit,
  guardConnections,
  openFileLimit
} from "./http/Connections.js"
import { oneAtATime } from "./http/Pipelining.js"
import { probeServer, type ProbeState } from "./http/Probes.js"
import { Admission, apiLive } from "./http/Handlers.js"
import { fastSend } from "./http/FastSend.js"
import { BodyBudget } from "./http/BodyBudget.js"
import { refuseArrivingBodies } from "./http/Draining.js"
import { gate, type GateOptions } from "./http/Middleware.js"
import { hostResultsRoute, sends, socketListener } from "./http/SocketRoutes.js"
import type { AgentloopShape } from "./services/Agentloop.js"
import { keyRedacted, type ModelProvider } from "./domain/ModelBinding.js"
import { ModelBindings, type ModelBindingsInvalid, type ModelBindingsShape } from "./services/ModelBindings.js"
import { EnvironmentBindings, Environments } from "./services/Environments.js"
import { Hosts, type HostsShape } from "./services/Hosts.js"
import { type EnvironmentBindingsInvalid, resolve } from "./domain/Environment.js"
import { Models, type ModelsShape } from "./services/Models.js"
import {
  hostStreamReserve,
  interruptWaitMs,
  readerStreams,
  reservedConnections,
  type ServerConfigShape,
  sessionStreams,
  streamConnections
} from "./services/ServerConfig.js"
import { Idempotency, type IdempotencyShape } from "./services/Idempotency.js"
import { validated } from "./services/ServerConfigOverrides.js"
import { Sessions, type SessionsShape } from "./services/Sessions.js"
import { describeSink, type TelemetrySink } from "./services/Telemetry.js"
import { sharedScheduler } from "./SharedScheduler.js"

/**
 * The public Event's schema, as the API's contract declares it: `brain/effect` exports it (as
 * `Event`) from here, the one module that may sit above both layers/ and http/.
 */
export { Event as EventSchema } from "./http/Schemas.js"

export class StartupRefused extends Data.TaggedError("StartupRefused")<{ readonly reason: string }> {
  override get message() {
    return this.reason
  }
}

export const parseListen = (listen: string) => {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(listen)
  if (!m) return undefined
  const port = Number(m[3])
  return port <= 65535 ? { host: (m[1] ?? m[2])!, port } : undefined
}

const isLoopback = (host: string) => host === "localhost" || host === "::1" || /^127\./.test(host)

const LISTEN_ERRORS: Readonly<Record<string, string>> = {
  EADDRINUSE: "the address is already in use (another server is listening there)",
  EADDRNOTAVAIL: "the address is not one of this machine's",
  EACCES: "permission denied (ports below 1024 need privileges)",
  ENOTFOUND: "the host name does not resolve",
  EAI_AGAIN: "the host name could not be resolved (DNS failure)"
}

/** An unusable binding as the start's refusal. Its message names where the bindings came from: "BRAIN_MODELS (inline JSON)" already says the setting, a file's path does not. */
const bindingsRefused = (e: ModelBindingsInvalid | EnvironmentBindingsInvalid): StartupRefused => {
  const setting = e._tag === "ModelBindingsInvalid" ? "BRAIN_MODELS" : "BRAIN_ENVIRONMENTS"
  return new StartupRefused({ reason: e.message.startsWith(setting) ? e.message : `${setting}: ${e.message}` })
}

/** Why the server could not start, in words an operator can act on. */
const describeStartupFailure = (listen: { readonly host: string; readonly port: number }) => (e: unknown): StartupRefused => {
  const err = e as { _tag?: string; message?: string; reason?: string; cause?: NodeJS.ErrnoException }
  if (err._tag === "ServeError") {
    const code = err.cause?.code ?? "unknown"
    return new StartupRefused({
      reason: `cannot listen on ${listen.host}:${listen.port}: ${LISTEN_ERRORS[code] ?? err.cause?.message ?? "unknown error"} (${code})`
    })
  }
  if (err._tag === "ModelBindingsInvalid" || err._tag === "EnvironmentBindingsInvalid") {
    return bindingsRefused(e as ModelBindingsInvalid | EnvironmentBindingsInvalid)
  }
  if (err._tag === "IdempotencyStoreFailed") return new StartupRefused({ reason: `the idempotency store cannot be opened: ${err.reason}` })
  return new StartupRefused({ reason: err.message || err.reason || `${err._tag ?? "error"}: ${String(e)}` })
}

/** The official Agentloop, compiled from loops/official (AssemblyScript) by `npm run build`. */
export const OFFICIAL_WASM = new URL("loops/official.wasm", DIST_ROOT)

const readOfficialLoop = Effect.tryPromise({
  try: () => fs.promises.readFile(OFFICIAL_WASM).then((b) => new Uint8Array(b)),
  catch: () => new StartupRefused({ reason: `${OFFICIAL_WASM.pathname} is missing: build first (npm run build)` })
})

/** The model providers this build carries, by the `provider` a binding names. */
const PROVIDERS: ModelsBound.Providers = { "openai-chat": openAiChat, "openai-responses": openAiResponses, anthropic }

/**
 * What an embedder (or a test's server) adds to the embedded default: in-process Agentloops and
 * tools, and a model provider in place of Brain's own (the scripted one and the bound ones: every
 * session's model calls go to it, docs/embedding.md).
 */
export interface Extensions {
  readonly loops?: Readonly<Record<string, AgentloopShape>>
  readonly tools?: Readonly<Record<string, ToolHandler>>
  readonly models?: ModelsShape
}

/** The telemetry sink BRAIN_TELEMETRY names (none: dropped). */
export const telemetryLayer = (sink: TelemetrySink) =>
  sink._tag === "File"
    ? TelemetryFile.layer(sink.path).pipe(Layer.provide(FileDriver.layerNode))
    : sink._tag === "Otlp"
    ? TelemetryOtlp.layer(sink.url).pipe(Layer.provide(NodeHttpClient.layerUndici))
    : TelemetryNone.layer

/**
 * Every service of the embedded default, over the data directory. The configuration is checked
 * first, by the rules the environment's settings are (`validated`, ServerConfigOverrides.ts): a
 * setting its rule refuses (a NaN, a negative grace, a blank data directory) fails the layer with a
 * typed ConfigError naming it, before anything is opened.
 */
export const servicesLayer = (config: ServerConfigShape, extensions: Extensions = {}) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    const checked = yield* validated(config)
    return servicesOf(checked, extensions, yield* loadBindings(checked))
  }))

/** The bindings BRAIN_MODELS and BRAIN_ENVIRONMENTS give, parsed at start. */
interface Bindings {
  readonly models: ModelBindingsShape
  readonly environments: typeof EnvironmentBindings.Service
}

/**
 * BRAIN_MODELS and BRAIN_ENVIRONMENTS parsed, before anything is opened or listened on
 * (docs/embedding.md): an unusable binding refuses the start without creating or touching the
 * data directory.
 */
const loadBindings = (config: ServerConfigShape) =>
  Effect.all({
    models: ModelBindingsConfig.load(config.models, new Set(Object.keys(PROVIDERS) as Array<ModelProvider>)),
    environments: EnvironmentBindingsConfig.load(config.environments)
  })

/**
 * The start's refusal of unusable BRAIN_MODELS or BRAIN_ENVIRONMENTS, for `brain serve` to ask
 * before it creates a missing data directory (`serve` checks them again, before it opens anything).
 */
export const checkBindings = (config: ServerConfigShape): Effect.Effect<void, StartupRefused> =>
  Effect.asVoid(Effect.mapError(loadBindings(config), bindingsRefused))

/** `servicesLayer` over a configuration already checked, with its bindings parsed. */
const servicesOf = (config: ServerConfigShape, extensions: Extensions, bindings: Bindings) => {
  const dataDir = path.resolve(config.dataDir)
  const budget = memoryBudget(config.cacheBytes)
  const files = fitToFileLimit({ connections: config.maxConnections, journalFiles: OPEN_JOURNAL_FILES })
  return sessionServices({
    config,
    journal: JournalFile.layerNode({
      dataDir,
      limits: { recentTotalBytes: budget.recentBytes, openFiles: files.journalFiles, commitLogBytes: config.journalLogBytes },
      maxHandleBytes: budget.journalBytes,
      maxListed: listedSessions()
    }),
    checkpoints: CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode)),
    // Registrations live under the data directory (the journal layer holds its lock); a session's
    // naming of its host holds while the journal has the session.
    base: Layer.mergeAll(
      Layer.succeed(ModelBindings, bindings.models),
      Layer.succeed(EnvironmentBindings, bindings.environments),
      HostsFile.layerConfigured
    ),
    models: extensions.models
      ? Layer.succeed(Models, extensions.models)
      : ModelsBound.layer(PROVIDERS).pipe(Layer.provide(NodeHttpClient.dispatcherLayer)),
    wasm: WasmHostWorkers.layer,
    agentloops: Layer.unwrapEffect(
      Effect.map(readOfficialLoop, (officialModule) =>
        AgentloopsModules.layer({
          loops: extensions.loops ?? {},
          officialModule,
          store: fileStore(path.join(dataDir, "agentloops")),
          storeBytes: config.maxWasmStoreBytes,
          cacheBytes: moduleCacheBytes(config.moduleCacheBytes)
        }))
    ),
    tools: extensions.tools ?? {},
    beside: Layer.mergeAll(
      // One Environments: `http` ones over HTTP, `host` ones over the registered hosts' command streams.
      Layer.effect(
        Environments,
        Effect.gen(function*() {
          const http = yield* EnvironmentsHttp.makeConfigured
          const host = EnvironmentsHost.make(yield* Hosts)
          return EnvironmentsHost.byDriver({ http, host })
        })
      ).pipe(Layer.provide(NodeHttpClient.dispatcherLayer)),
      telemetryLayer(config.telemetry),
      // The idempotency store lives beside the journal; the journal layer holds the directory lock.
      IdempotencyFile.layerNode({
        dataDir,
        retentionMs: config.requestRetentionMs,
        maxAnswerBytes: config.idempotencyMaxAnswerBytes,
        maxKeys: config.maxIdempotencyKeys,
        maxSessionKeys: config.maxSessionLogKeys,
        deleteReserveKeys: config.deleteReserveKeys
      })
    )
  })
}

/** What the gate checks every request against, for the server `config` configures. */
const gateOptions = (config: ServerConfigShape, admission: Admission, guard?: ConnectionGuard): Omit<GateOptions, "route"> => ({
  apiToken: config.apiToken,
  maxRequestBytes: config.maxRequestBytes,
  draining: () => admission.draining,
  bodies: new BodyBudget(inflightBodyBytes(config.inflightBodyBytes)),
  ...(guard ? { onProbation: guard.onProbation } : {})
})

/** The HTTP server over the services, its gate checking requests against `options`. */
export const httpLayer = (config: ServerConfigShape, admission: Admission, server: http.Server, options: Omit<GateOptions, "route">) => {
  const { host, port } = parseListen(config.listen)!
  // Sends, every turn, are routed by the gate itself (FastSend.ts) with the route's own schemas and handler.
  const gateLayer = Layer.unwrapEffect(Effect.gen(function*() {
    const route = fastSend(yield* Sessions, yield* Idempotency)
    const hosts = yield* Hosts
    return HttpApiBuilder.middleware(gate({ ...options, route, authorizeHost: hosts.authorize }))
  }))
  return HttpApiBuilder.serve().pipe(
    Layer.provide(gateLayer),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json", additionalPropertiesStrategy: "strict" })),
    Layer.provide(apiLive(admission)),
    HttpServer.withLogAddress,
    // No tracer exports spans from this server, so the platform's per-request server span (a
    // parsed URL, redacted headers, a dozen attributes) is pure cost on every request: off.
    HttpMiddleware.withTracerDisabledWhen(() => true),
    Layer.provide(NodeHttpServer.layer(() => server, { host, port }))
  )
}

/**
 * Puts the listener for the routes taken at the socket (SocketRoutes.ts: sends, a host's results)
 * in front of the platform's own: it takes the requests it can answer as they stand and passes
 * every other request on. Left as it is (false) if the server does not have exactly the
 * platform's one listener.
 */
const takeAtTheSocket = (
  server: http.Server,
  options: Omit<GateOptions, "route">,
  services: { readonly sessions: SessionsShape; readonly store: IdempotencyShape; readonly hosts: HostsShape },
  runtime: Runtime.Runtime<never>,
  closing: () => boolean
) => {
  const listeners = server.listeners("request")
  if (listeners.length !== 1) return false
  const platform = listeners[0] as (request: http.IncomingMessage, response: http.ServerResponse) => void
  server.removeListener("request", platform)
  const routes = [sends(services.sessions, services.store), hostResultsRoute(services.hosts)]
  // Pipelined requests are handed over one after another (Pipelining.ts, `oneAtATime`).
  // Once a stop begins, every answer closes its connection (Connections.ts, `closeAfterAnswers`).
  server.on("request", oneAtATime(closingWhen(closing, socketListener(options, routes, runtime, platform))))
  return true
}

/**
 * Opens the probes' own listener (BRAIN_HEALTH_LISTEN, Probes.ts) for the scope: closed, with its
 * connections, when the server stops. Answers where it listens.
 */
const listenProbes = (at: { readonly host: string; readonly port: number }, state: ProbeState) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: http.Server; readonly where: string }, StartupRefused>((resume) => {
      const server = probeServer(state)
      const failed = (error: NodeJS.ErrnoException) => {
        const code = error.code ?? "unknown"
        resume(Effect.fail(
          new StartupRefused({
            reason: `cannot listen on ${at.host}:${at.port} (BRAIN_HEALTH_LISTEN): ${LISTEN_ERRORS[code] ?? error.message} (${code})`
          })
        ))
      }
      server.once("error", failed)
      server.listen(at.port, at.host, () => {
        server.removeListener("error", failed)
        const address = server.address()
        resume(Effect.succeed({ server, where: typeof address === "object" && address ? `${address.address}:${address.port}` : `${at.host}:${at.port}` }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  ).pipe(Effect.map(({ where }) => where))

/** Milliseconds. How long a drain lets the answers of requests still in flight be written, once its turns are closed. */
const DRAIN_ANSWERS_MS = 2_000
/**
 * Milliseconds. How long a drain leaves a connection that has sent nothing yet, counted from its
 * accept: one opened during the drain (a client told `Connection: close` reconnecting for its next
 * request) gets its request answered rather than its connection reset; one opened before, and
 * never used, is closed at once. Below DRAIN_ANSWERS_MS, which bounds the wait anyway.
 */
const UNUSED_GRACE_MS = 1_000
/** Milliseconds. How often it looks for connections with nothing in flight to close. */
const DRAIN_POLL_MS = 10

/** Resolves on the first SIGTERM or SIGINT; later ones are ignored while the drain runs. */
const firstSignal = Effect.gen(function*() {
  const signalled = yield* Deferred.make<string>()
  const onSignal = (signal: string) => () => Deferred.unsafeDone(signalled, Effect.succeed(signal))
  const handlers = { SIGTERM: onSignal("SIGTERM"), SIGINT: onSignal("SIGINT") }
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      process.on("SIGTERM", handlers.SIGTERM)
      process.on("SIGINT", handlers.SIGINT)
    }),
    () => Effect.void // kept until exit, so a repeated signal never kills the drain
  )
  return signalled
})

/**
 * Serves until SIGTERM/SIGINT, then stops admitting (503), drains admitted turns, creates, ends and deletes (bounded by
 * BRAIN_DRAIN_DEADLINE_MS), ends SSE streams, writes the checkpoints warm sessions are due (within what is left
 * of that deadline) and closes the listener, the journal and the lock.
 */
export const serve = (config: ServerConfigShape, extensions: Extensions = {}) =>
  Effect.withScheduler(serveOn(config, extensions), sharedScheduler)

/** The server as `serve` runs it, on whichever scheduler the caller's fiber has. */
const serveOn = (given: ServerConfigShape, extensions: Extensions) =>
  Effect.scoped(Effect.gen(function*() {
    // Checked once, before anything is opened or listened on (a configuration from `fromConfig`
    // passes as it stands; one given in code may not).
    const config = yield* Effect.mapError(validated(given), (e) => new StartupRefused({ reason: e.message }))
    const listen = parseListen(config.listen)
    if (!listen) return yield* Effect.fail(new StartupRefused({ reason: `BRAIN_LISTEN ${JSON.stringify(config.listen)} is not host:port` }))
    const probes = config.healthListen === undefined ? undefined : parseListen(config.healthListen)
    if (config.healthListen !== undefined && probes === undefined) {
      return yield* Effect.fail(new StartupRefused({ reason: `BRAIN_HEALTH_LISTEN ${JSON.stringify(config.healthListen)} is not host:port` }))
    }
    if (!isLoopback(listen.host) && config.apiToken === undefined) {
      return yield* Effect.fail(
        new StartupRefused({ reason: `refusing to listen on ${listen.host} beyond loopback without BRAIN_API_TOKEN (set and not blank)` })
      )
    }
    if (reservedConnections(config) >= config.maxConnections) {
      return yield* Effect.fail(
        new StartupRefused({
          reason: `BRAIN_RESERVED_CONNECTIONS (${reservedConnections(config)}) must be below BRAIN_MAX_CONNECTIONS (${config.maxConnections}): SSE streams would get no connection`
        })
      )
    }
    if (config.requestTimeoutMs < config.headersTimeoutMs) {
      return yield* Effect.fail(
        new StartupRefused({
          reason: `BRAIN_REQUEST_TIMEOUT_MS (${config.requestTimeoutMs}) must be at least BRAIN_HEADERS_TIMEOUT_MS (${config.headersTimeoutMs}): both count from a request's first byte, and its headers are part of it`
        })
      )
    }
    const parsed = yield* Effect.mapError(loadBindings(config), bindingsRefused)
    const signalled = yield* firstSignal
    const server = http.createServer({ connectionsCheckingInterval: TIMEOUT_CHECK_MS })
    const fitted = fitToFileLimit({ connections: config.maxConnections, journalFiles: OPEN_JOURNAL_FILES })
    // The reserve follows the connections served: unset, a quarter of them.
    const reserved = reservedConnections(config, fitted.connections)
    if (fitted.connections < config.maxConnections) {
      yield* Effect.logWarning(
        `the open-file limit (${openFileLimit()}) allows ${fitted.connections} connections and ${fitted.journalFiles} open journal files; raise it (ulimit -n) to serve BRAIN_MAX_CONNECTIONS (${config.maxConnections})`
      )
      if (reserved >= fitted.connections) {
        yield* Effect.logWarning(
          `BRAIN_RESERVED_CONNECTIONS (${reserved}) keeps every connection the open-file limit allows from SSE streams: every stream is refused`
        )
      }
    }
    const streams = streamConnections(config, fitted.connections)
    const admission = new Admission({ streams, reserved, forHosts: hostStreamReserve(streams) })
    // One session's readers may hold a share of the readers' streams, never all of them: a bound
    // set above them would never apply, so it is lowered to them, and said.
    const readers = readerStreams(config, fitted.connections)
    const perSession = sessionStreams(config, fitted.connections)
    if (config.sseMaxSubscribersPerSession !== undefined && perSession < config.sseMaxSubscribersPerSession) {
      yield* Effect.logWarning(
        `BRAIN_SSE_MAX_SUBSCRIBERS_PER_SESSION (${config.sseMaxSubscribersPerSession}) is above the streams sessions' readers may hold (${readers}: BRAIN_MAX_CONNECTIONS less BRAIN_RESERVED_CONNECTIONS less the eighth kept for hosts' command streams, at most BRAIN_SSE_MAX_SUBSCRIBERS), so it would never apply: one session may hold ${perSession}`
      )
    }
    const served: ServerConfigShape = { ...config, sseMaxSubscribersPerSession: perSession }
    const logClosed = Runtime.runSync(yield* Effect.runtime<never>())
    const guard = guardConnections(server, {
      maxConnections: fitted.connections,
      headersTimeoutMs: config.headersTimeoutMs,
      requestTimeoutMs: config.requestTimeoutMs,
      keepAliveTimeoutMs: config.keepAliveTimeoutMs,
      responseStallMs: config.responseStallMs,
      apiToken: config.apiToken
    }, ({ by, peer }) => logClosed(Effect.log(`connection ${peer} closed: ${CLOSED_BY[by]}`).pipe(Effect.annotateLogs({ closed_by: by, peer }))))
    const gating = gateOptions(config, admission, guard)
    const context = yield* Layer.build(Layer.merge(httpLayer(served, admission, server, gating), Layer.empty).pipe(
      Layer.provideMerge(servicesOf(served, extensions, parsed))
    )).pipe(Effect.mapError(describeStartupFailure(listen)))
    const sessions = Context.get(context, Sessions)
    const services = { sessions, store: Context.get(context, Idempotency), hosts: Context.get(context, Hosts) }
    if (!takeAtTheSocket(server, gating, services, yield* Effect.runtime<never>(), guard.closingAfterAnswers)) {
      yield* Effect.logWarning("the HTTP server has other request listeners than the platform's: every request goes through the platform's handler")
    }
    // Probes get a listener of their own once the API's listens: ready means the API serves.
    const probesAt = probes === undefined ? undefined : yield* listenProbes(probes, { draining: () => admission.draining, full: guard.full })
    const bindings = Context.get(context, ModelBindings)
    const address = server.address()
    const where = typeof address === "object" && address ? `${address.address}:${address.port}` : config.listen
    yield* Effect.log(
      bindings.names.length === 0
        ? "model bindings: none (BRAIN_MODELS unset); sessions use the scripted model"
        : `model bindings: ${bindings.names.map((n) => `${n} (${bindings.get(n)!.binding.provider} ${bindings.get(n)!.binding.model})`).join(", ")}`
    )
    for (const name of bindings.names) {
      const key = bindings.get(name)!.apiKey
      if (key !== undefined && !keyRedacted(Redacted.value(key))) {
        yield* Effect.logWarning(
          `model binding ${name}: its key is shorter than ${MIN_REDACTED_KEY_CHARS} characters, so it is not redacted from what Brain records and shows (docs/models.md); a real provider key is longer`
        )
      }
    }
    const environmentBindings = Context.get(context, EnvironmentBindings)
    yield* Effect.log(
      environmentBindings.names.length === 0
        ? "environment bindings: none (BRAIN_ENVIRONMENTS unset)"
        : `environment bindings: ${environmentBindings.names.map((n) => `${n} (${resolve(environmentBindings.get(n)!.binding).base_url})`).join(", ")}`
    )
    for (const name of environmentBindings.names) {
      const bound = environmentBindings.get(name)!
      const values = [...bound.headers.map(([, v]) => v), ...(bound.token !== undefined ? [bound.token] : [])]
      if (values.some((v) => !keyRedacted(Redacted.value(v)))) {
        yield* Effect.logWarning(
          `environment binding ${name}: a credential of it is shorter than ${MIN_REDACTED_KEY_CHARS} characters, so it is not redacted from what Brain records and shows (docs/environments.md)`
        )
      }
    }
    yield* Effect.log(describeSink(config.telemetry))
    yield* Effect.log(`brain listening on http://${where} (data: ${path.resolve(config.dataDir)})`)
    if (probesAt !== undefined) yield* Effect.log(`health probes also on http://${probesAt}/health/live and /health/ready`)
    yield* Effect.log(
      `try: curl -s -X POST http://${where}/v1/sessions${config.apiToken === undefined ? "" : ` -H "Authorization: Bearer $BRAIN_API_TOKEN"`} -H 'content-type: application/json' -d '{"model":{"provider":"scripted"}}'`
    )
    const signal = yield* Deferred.await(signalled)
    const signalledAt = yield* Clock.currentTimeMillis
    yield* Effect.log(`${signal}: draining admitted turns, creates, ends and deletes, admitting no new work`)
    admission.draining = true
    // No keep-alive client is invited to send another request on a connection the stop will close.
    guard.closeAfterAnswers()
    // A request whose body is still arriving on a route the drain no longer admits is answered now.
    refuseArrivingBodies()
    const drained = yield* sessions.drain.pipe(Effect.timeoutOption(Duration.millis(config.drainDeadlineMs)))
    if (drained._tag === "None") {
      // Past the deadline: cancel what is still running (recorded as interrupted), bounded by the
      // cancel grace the loops get plus the time to record the outcomes.
      yield* Effect.log("drain deadline passed: interrupting the turns, creates, ends and deletes still running")
      yield* sessions.interruptAll.pipe(
        Effect.timeoutOption(Duration.millis(interruptWaitMs(config)))
      )
    }
    admission.stop()
    // Answers still on their way (a turn that just closed, a cancel that waited for its turn) are
    // written: a connection is closed once no request is in flight on it (SSE streams end with the
    // stop), and whatever is still open after DRAIN_ANSWERS_MS is abandoned. Node counts a
    // connection idle once its answer has ended, though a slow reader may not have taken all of it
    // yet: idle ones are closed only when no socket still holds bytes to write. A connection that
    // never sent a byte has no answer to wait for (`closeUnused`).
    for (let waited = 0;; waited += DRAIN_POLL_MS) {
      guard.closeUnused(UNUSED_GRACE_MS)
      if (!guard.writing()) server.closeIdleConnections()
      if (guard.open() === 0 || waited >= DRAIN_ANSWERS_MS) break
      yield* Effect.sleep(Duration.millis(DRAIN_POLL_MS))
    }
    const abandoned = guard.open()
    server.closeAllConnections()
    yield* Effect.log(
      abandoned === 0 ? "drained; closing" : `drained; closing ${abandoned} connection(s) still open after ${DRAIN_ANSWERS_MS} ms`
    )
    // Sessions kept warm (by a TTL, or for their size) were never released, so none wrote its
    // checkpoint: each that is due one writes it now, within what is left of the drain deadline
    // (counted from the signal), and whatever is still being written then is abandoned.
    const left = signalledAt + config.drainDeadlineMs - (yield* Clock.currentTimeMillis)
    if (left > 0) {
      const written = yield* sessions.checkpointWarm.pipe(Effect.timeoutOption(Duration.millis(left)))
      yield* Effect.log(
        Option.isSome(written)
          ? `checkpointed ${written.value} warm session(s)`
          : "drain deadline passed while checkpointing warm sessions: the rest open from their journals"
      )
    }
  }))
