/**
 * The OpenAPI 3.1 document, generated from the same contract the server and the SDK use.
 */
import * as OpenApi from "@effect/platform/OpenApi"
import { BrainApi } from "./Api.js"

export const openApiDocument = () => OpenApi.fromApi(BrainApi, { additionalPropertiesStrategy: "strict" })
