-- Tool calls in the gateway's journal (issue #47, gateway/team-tools.ts): a call of one of the
-- agent's team tools through the gateway's MCP server is numbered with the episode's turns and
-- journaled with the tool's answer (result or tool error, as JSON), so a retried episode gets
-- it without the tool being called again. A row is a turn (tokens, log-probs, stop reason) or a
-- tool call (tool_reply), never both.
ALTER TABLE gateway_calls
  ALTER COLUMN tokens DROP NOT NULL,
  ALTER COLUMN logprobs DROP NOT NULL,
  ALTER COLUMN stop_reason DROP NOT NULL,
  ADD COLUMN tool_reply jsonb,
  ADD CONSTRAINT gateway_calls_turn_or_tool CHECK (
    (tool_reply IS NULL AND tokens IS NOT NULL AND logprobs IS NOT NULL AND stop_reason IS NOT NULL)
    OR (tool_reply IS NOT NULL AND tokens IS NULL AND logprobs IS NULL AND stop_reason IS NULL));
