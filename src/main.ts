/**
 * The composition root: wires the layers and the HTTP server. The CLI (`brain serve`) and
 * `npm start` call `serve`. Nothing else sits above both layers/ and http/.
 */
import { HttpApiBuilder, HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import * as http from "node:http"
import * as path from "node:path"
import { Context, Data, Deferred, Duration, Effect, Layer } from "effect"
import * as AgentloopsInProcess from "./layers/AgentloopsInProcess.js"
import * as CheckpointStore from "./layers/CheckpointStore.js"
import * as EffectFenceLive from "./layers/EffectFenceLive.js"
import * as IdempotencyFile from "./layers/IdempotencyFile.js"
import * as JournalFile from "./layers/JournalFile.js"
import * as ModelsScripted from "./layers/ModelsScripted.js"
import * as ProjectionLive from "./layers/ProjectionLive.js"
import * as SessionsLive from "./layers/SessionsLive.js"
import * as ToolsInProcess from "./layers/ToolsInProcess.js"
import * as FileDriver from "./layers/journal/FileDriver.js"
import { Admission, apiLive } from "./http/Handlers.js"
import { gate } from "./http/Middleware.js"
import type { AgentloopShape } from "./services/Agentloop.js"
import { Models, type ModelsShape } from "./services/Models.js"
import { ServerConfig, type ServerConfigShape } from "./services/ServerConfig.js"
import { Sessions } from "./services/Sessions.js"

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

/**
 * What an embedder (or a test's server) adds to the embedded default: in-process Agentloops and
 * tools, and a model provider in place of the scripted one.
 */
export interface Extensions {
  readonly loops?: Readonly<Record<string, AgentloopShape>>
  readonly tools?: Readonly<Record<string, ToolsInProcess.ToolHandler>>
  readonly models?: ModelsShape
}

/** Every service of the embedded default, over the data directory. */
export const servicesLayer = (config: ServerConfigShape, extensions: Extensions = {}) => {
  const dataDir = path.resolve(config.dataDir)
  const journal = JournalFile.layerNode({ dataDir })
  const checkpoints = CheckpointStore.layerFile(dataDir).pipe(Layer.provide(FileDriver.layerNode))
  const base = Layer.merge(journal, Layer.succeed(ServerConfig, config))
  const deps = Layer.mergeAll(
    ProjectionLive.layer.pipe(Layer.provide(checkpoints)),
    EffectFenceLive.layer,
    extensions.models ? Layer.succeed(Models, extensions.models) : ModelsScripted.layer,
    ToolsInProcess.layer(extensions.tools ?? {}),
    AgentloopsInProcess.layer(extensions.loops ?? {}, AgentloopsInProcess.fileModules(path.join(dataDir, "agentloops"))),
    // The idempotency store lives beside the journal; the journal layer holds the directory lock.
    IdempotencyFile.layerNode({
      dataDir,
      retentionMs: config.requestRetentionMs,
      maxAnswerBytes: config.idempotencyMaxAnswerBytes
    })
  ).pipe(Layer.provideMerge(base))
  return SessionsLive.layer.pipe(Layer.provideMerge(deps))
}

/** The HTTP server over the services. */
export const httpLayer = (config: ServerConfigShape, admission: Admission, server: http.Server) => {
  const { host, port } = parseListen(config.listen)!
  return HttpApiBuilder.serve().pipe(
    Layer.provide(HttpApiBuilder.middleware(gate({
      apiToken: config.apiToken,
      maxRequestBytes: config.maxRequestBytes,
      draining: () => admission.draining
    }))),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json", additionalPropertiesStrategy: "strict" })),
    Layer.provide(apiLive(admission)),
    HttpServer.withLogAddress,
    Layer.provide(NodeHttpServer.layer(() => server, { host, port }))
  )
}

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
 * Serves until SIGTERM/SIGINT, then stops admitting (503), drains admitted turns (bounded by
 * BRAIN_DRAIN_DEADLINE_MS), ends SSE streams and closes the listener, the journal and the lock.
 */
export const serve = (config: ServerConfigShape, extensions: Extensions = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const listen = parseListen(config.listen)
    if (!listen) return yield* Effect.fail(new StartupRefused({ reason: `BRAIN_LISTEN ${JSON.stringify(config.listen)} is not host:port` }))
    if (!isLoopback(listen.host) && config.apiToken === undefined) {
      return yield* Effect.fail(new StartupRefused({ reason: `refusing to listen on ${listen.host} beyond loopback without BRAIN_API_TOKEN` }))
    }
    const signalled = yield* firstSignal
    const admission = new Admission()
    const server = http.createServer()
    server.keepAliveTimeout = 5_000
    // Requests Node itself refuses (a malformed request line, headers too large) get Brain's error body too.
    server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
      if (!socket.writable) return socket.destroy()
      const body = JSON.stringify({ code: "invalid_request", message: `the request could not be parsed (${err.code ?? "bad request"})`, retryable: false })
      socket.end(
        `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
      )
    })
    const context = yield* Layer.build(Layer.merge(httpLayer(config, admission, server), Layer.empty).pipe(
      Layer.provideMerge(servicesLayer(config, extensions))
    ))
    const sessions = Context.get(context, Sessions)
    const address = server.address()
    const where = typeof address === "object" && address ? `${address.address}:${address.port}` : config.listen
    yield* Effect.log(`brain listening on http://${where} (data: ${path.resolve(config.dataDir)})`)
    yield* Effect.log(
      `try: curl -s -X POST http://${where}/v1/sessions -H 'content-type: application/json' -d '{"model":{"provider":"scripted"}}'`
    )
    const signal = yield* Deferred.await(signalled)
    yield* Effect.log(`${signal}: draining admitted turns, admitting no new work`)
    admission.draining = true
    const drained = yield* sessions.drain.pipe(Effect.timeoutOption(Duration.millis(config.drainDeadlineMs)))
    if (drained._tag === "None") {
      // Past the deadline: cancel what is still running (recorded as interrupted), bounded by the
      // cancel grace the loops get plus the time to record the outcomes.
      yield* Effect.log("drain deadline passed: interrupting the turns still running")
      yield* sessions.interruptAll.pipe(
        Effect.timeoutOption(Duration.millis(2 * config.cancelGraceMs + config.cleanupDeadlineMs))
      )
    }
    admission.stop()
    server.closeIdleConnections()
    // Answers of turns just closed are written; whatever is left open now is abandoned.
    yield* Effect.sleep(Duration.millis(50))
    server.closeAllConnections()
    yield* Effect.log("drained; closing")
  }))
