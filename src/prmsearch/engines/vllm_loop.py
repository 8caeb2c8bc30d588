"""One offline vLLM engine stepped on its own thread, taking requests from any thread at any time.

``LLM.generate`` adds a batch, steps the engine until that batch is done and returns: the engine
idles between calls and a batch's last long sample holds every other caller back. An
`EngineLoop` instead keeps stepping while anything is unfinished and adds new requests between
steps as they arrive, so the search driver can hand each problem's requests over the moment
the problem is ready (continuous batching across problems, as a server does) and each caller
gets its outputs the moment its own requests finish.

Only the loop's thread touches the engine. Outputs are vLLM ``RequestOutput`` objects (final
only), in the order of the submitted prompts.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from concurrent.futures import Future
from typing import Any


class EngineLoopClosed(RuntimeError):
    """The loop was closed, or its engine failed; no more requests are taken."""


class _Batch:
    """One caller's prompts: their outputs as they finish, and the future that gets them."""

    __slots__ = ("future", "left", "outputs", "params", "prompts")

    def __init__(self, prompts: list[Any], params: list[Any]) -> None:
        self.prompts = prompts
        self.params = params
        self.outputs: list[Any] = [None] * len(prompts)
        self.left = len(prompts)
        self.future: Future = Future()


class EngineLoop:
    """Steps ``llm``'s engine on a daemon thread (see the module docstring).

    Args:
        llm: an offline ``vllm.LLM``; nothing else may use its engine while the loop runs.
    """

    def __init__(self, llm: Any) -> None:
        self.engine = llm.llm_engine
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._error: BaseException | None = None
        self._open = True
        self._thread = threading.Thread(target=self._run, name="prmsearch-vllm-loop", daemon=True)
        self._thread.start()

    def submit(self, prompts: list[Any], params: list[Any]) -> Future:
        """Add prompts (with one ``SamplingParams`` each) to the running engine; a future of
        their final ``RequestOutput`` list, in order."""
        if len(prompts) != len(params):
            raise ValueError(f"got {len(params)} sampling params for {len(prompts)} prompts")
        batch = _Batch(list(prompts), list(params))
        if not prompts:
            batch.future.set_result([])
            return batch.future
        with self._lock:
            if not self._open:
                raise EngineLoopClosed(f"the vLLM engine loop is closed{self._why()}")
            self._inbox.put(batch)
        return batch.future

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the loop's thread between engine steps (anything else that touches
        the engine, e.g. ``llm.reset_prefix_cache``) and return its result."""
        future: Future = Future()
        with self._lock:
            if not self._open:
                raise EngineLoopClosed(f"the vLLM engine loop is closed{self._why()}")
            self._inbox.put((fn, future))
        return future.result()

    def generate(self, prompts: list[Any], params: list[Any]) -> list[Any]:
        """`submit` and wait: the outputs in prompt order."""
        return self.submit(prompts, params).result()

    def close(self) -> None:
        """Stop the thread (the engine itself stays up). Requests still running are aborted and
        their callers get :class:`EngineLoopClosed`: an engine is closed when its owner is done
        with it, or on the way out (an interrupt, SIGTERM), where nobody waits for them."""
        with self._lock:
            if self._open:
                self._open = False
                self._inbox.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _why(self) -> str:
        return f" (its engine failed: {self._error!r})" if self._error is not None else ""

    # ------------------------------------------------------------------------- the thread
    def _run(self) -> None:
        from vllm.sampling_params import RequestOutputKind

        pending: dict[str, tuple[_Batch, int]] = {}
        stopping = False
        while True:
            busy = bool(pending)
            try:
                item = self._inbox.get(block=not busy)
            except queue.Empty:
                item = False
            while item is not False:
                if item is None:
                    stopping = True
                elif isinstance(item, tuple):  # a call to run here
                    fn, future = item
                    try:
                        future.set_result(fn())
                    except Exception as exc:
                        future.set_exception(exc)
                else:
                    self._add(item, pending, RequestOutputKind.FINAL_ONLY)
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    item = False
            if stopping:
                self._abort_all(pending)
                return
            if not pending:
                continue
            try:
                outputs = self.engine.step()
            except BaseException as exc:  # the engine is gone: fail every caller, take no more
                self._fail_all(exc, pending)
                return
            for output in outputs:
                if not getattr(output, "finished", False):
                    continue
                entry = pending.pop(str(output.request_id), None)
                if entry is None:
                    continue
                batch, index = entry
                batch.outputs[index] = output
                batch.left -= 1
                if batch.left == 0:
                    batch.future.set_result(batch.outputs)

    def _add(self, batch: _Batch, pending: dict[str, tuple[_Batch, int]], final_only: Any) -> None:
        """Add one batch's prompts to the engine; a prompt the engine refuses fails its batch."""
        added: list[str] = []
        try:
            for index, (prompt, params) in enumerate(zip(batch.prompts, batch.params, strict=True)):
                params.output_kind = final_only
                request_id = str(next(self._ids))
                self.engine.add_request(request_id, prompt, params)
                added.append(request_id)
                pending[request_id] = (batch, index)
        except Exception as exc:
            for request_id in added:
                pending.pop(request_id, None)
            if added:
                self.engine.abort_request(added)
            batch.future.set_exception(exc)

    def _abort_all(self, pending: dict[str, tuple[_Batch, int]]) -> None:
        """Abort the requests still running and fail their callers (the loop is closing)."""
        if pending:
            with contextlib.suppress(Exception):
                self.engine.abort_request(list(pending))
        closed = EngineLoopClosed("the vLLM engine loop was closed before these requests finished")
        for batch, _ in pending.values():
            if not batch.future.done():
                batch.future.set_exception(closed)

    def _fail_all(self, exc: BaseException, pending: dict[str, tuple[_Batch, int]]) -> None:
        with self._lock:
            self._open = False
            self._error = exc
        failed = {id(batch): batch for batch, _ in pending.values()}
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, tuple):
                item[1].set_exception(exc)
            elif item is not None:
                failed[id(item)] = item
        for batch in failed.values():
            if not batch.future.done():
                batch.future.set_exception(exc)
