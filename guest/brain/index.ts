/**
 * The AssemblyScript guest library: everything a loop imports (`import { ... } from
 * "<path>/guest/brain"`). docs/agentloops.md documents it; docs/abi.md is the contract underneath.
 */
export * from "./json"
export { Answer, brainAbort, brain_abi_v1, brain_alloc, brain_configuration_unread, brain_events_from_end, brain_model_metadata_unread, brain_runtime_unread, brain_transcript_tail, call, fail, HostError, readInput, returnError, returnErrorValue, returnHostError, returnOk, returnOkSaving } from "./abi"
export { Activation, message, readActivation } from "./activation"
export { dispatch, dispatchSaving, emit, events, kvDelete, kvPut, kvRead, model, modelContext, modelSaving, setTranscript, setTranscriptDelta, telemetry, transcriptRange } from "./host"
export { Transcript } from "./transcript"
