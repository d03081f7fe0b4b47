"""LangChain's own summariser as a rule: SummarizationMiddleware of langchain 1.5.0, called directly, outside an agent.

    from langchain_summary import summarised
    selected, calls = summarised(case, count, call)   # call: summaries.py's seam, live or replaying a recording

The middleware gets the request's history and question as LangChain messages (convert_to_messages, each one's id its
place in the request), the lab's exact counter as token_counter (the request counted with its system message, as it
would be sent), trigger ('tokens', allowance) and keep ('tokens', allowance less summaries.py's target), and a chat
model that asks `call` (max_tokens the target; a call that fails is not retried), and trims what it summarises to
the allowance (as the seed's prompts must fit it; LangChain's default is 4,000 tokens). Everything else is
LangChain's: its summary prompt, its cut (which keeps a call with its results) and its summary message, a user
message 'Here is a summary of the conversation to date:' with the summary unquoted, whose text the selection also
gives as 'summary'. The request is the system message, then what before_model leaves. It reads and writes nothing;
langchain is imported on first use.
"""
from shapes import allowance, build_request, selection, turn_messages
from summaries import summary_target

NAME = 'SummarizationMiddleware (langchain 1.5.0)'  # its row in summary_table.py


def chat_model(call, limit: int):
    """A LangChain chat model whose every answer is call([{'role': 'user', ...}], {'max_tokens': limit})'s text.
    What call raises goes out as a ModelError, which the middleware's retry (3 attempts, seconds apart) never
    retries: the lab retries no call, and a missing recorded call is one line at once; summarised re-raises it."""
    from langchain_core.exceptions import ModelError
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Recorded(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return 'context-lab-recorded'

        def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
            try:
                reply = call(convert_to_openai_messages(messages), {'max_tokens': limit})
            except Exception as error:
                raise ModelError() from error
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply['text']))])
    return Recorded()


def as_request(request: list[dict], messages) -> list[dict]:
    """The request's own message for each LangChain message whose id is its place (with the text LangChain left of
    it, where its trimming cut one), in the request's order, after the middleware's own messages (its summary) as the
    user messages they are. Order, since trim_messages' 'last' counts its candidates newest first (agent_rules.py)."""
    def own(message) -> dict:
        if not (message.id or '').isdigit():
            return {'role': 'user', 'content': message.text}
        original = request[int(message.id)]
        return original if message.text == (original['content'] or '') else {**original, 'content': message.text}
    place = (lambda message: int(message.id) if (message.id or '').isdigit() else -1)
    return [own(message) for message in sorted(messages, key=place)]


def summarised(case: dict, count, call) -> tuple[dict, int]:
    """(the request SummarizationMiddleware leaves, as every rule returns it, with its summary message's text as
    'summary' where it made one, as summaries.compact's; the summary calls it made)."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.exceptions import ModelError
    from langchain_core.messages import convert_to_messages

    request = build_request(case, range(len(case['history'])))
    room, made = allowance(case), []
    target = summary_target(room, case['budget']['max_new_tokens'])
    counted = (lambda messages, options: made.append(1) or call(messages, options))
    middleware = SummarizationMiddleware(
        model=chat_model(counted, target), trigger=('tokens', room), keep=('tokens', room - target),
        token_counter=lambda messages: count([request[0], *as_request(request, messages)]),
        trim_tokens_to_summarize=room)
    history = convert_to_messages([{**message, 'id': str(place)} for place, message in enumerate(request) if place])
    try:
        update = middleware.before_model({'messages': history}, None)
    except ModelError as error:  # chat_model's: what the call raised
        raise error.__cause__ from None
    kept = history if update is None else update['messages'][1:]  # the first removes every message before
    messages = [request[0], *as_request(request, kept)]
    turn_of = [None, *(index for index, turn in enumerate(case['history']) for _ in turn_messages(turn)), None]
    turns = {turn_of[int(message.id)] for message in kept if (message.id or '').isdigit()} - {None}
    summary = '\n'.join(message.text for message in kept if not (message.id or '').isdigit())  # its own message
    chosen = selection(messages, sorted(turns), 0, count(messages))
    return ({**chosen, 'summary': summary} if summary else chosen), len(made)
