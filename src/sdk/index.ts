/**
 * `brain/sdk`: the Promise client (`Brain`), the Effect client (`BrainClient`), their errors and
 * the wire types. Web APIs only: no Node-only import, here or below (test/architecture).
 */
export { Brain, type BrainOptions, type ListOptions, type MutationOptions, Session, Sessions } from "./Brain.js"
export { BrainClient, type BrainApiClient, type BrainClientOptions, type BrainClientShape } from "./BrainClient.js"
export { BrainClosed, BrainError, type BrainErrorCode } from "./Errors.js"
export { type EventsOptions, PAGE_LIMIT, RECONNECT_DEADLINE_MS } from "./Events.js"
export { type Fetch, MAX_ATTEMPTS, RETRY_BASE_MS } from "./Transport.js"
export type * from "./Types.js"
