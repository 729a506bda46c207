/** The API teams are written with. */
export { agent, defaultSampling, type AgentSpec, type Sampling } from './agent';
export { chatTemplate, type ChatMessage, type ChatTemplate } from './chat-template';
export { LimitExceeded, type AgentHandle, type TurnHandle } from './episode';
export { lora, tinyLM, transformer, type ModelSpec } from './model';
export { exactMatch, lastNumber, normalizeAnswer, numericMatch, onLastTurn, tokenF1 } from './reward-helpers';
export { generatedTasks, jsonlTasks, type Task, type TaskSource } from './tasks';
export { defineTeam, TeamDefinitionError, type RewardFn, type Team, type TeamRunDefaults, type TurnView } from './team';
export { charTokenizer, vocabTokenizer, type Tokenizer } from './tokenizer';
export {
  defaultSandboxLimits,
  sandboxTool,
  type SandboxInput,
  type SandboxLanguage,
  type SandboxLimits,
  type SandboxOutput,
  type SandboxToolOptions,
} from './sandbox-tool';
export { defineTool, keySyntax, tagSyntax, type Tool, type ToolContext, type ToolSyntax } from './tool';
export { hermesSyntax } from './hermes';
export { mcpServer, type McpServer, type McpServerOptions, type McpToolDeclaration, type McpToolInfo, type McpToolOutput } from './mcp';
