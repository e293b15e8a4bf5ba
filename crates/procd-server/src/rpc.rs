//! The method table: `ProcdApiServer` implemented over the registry. Each
//! method only converts parameters and errors; the logic is in procd-core.

use crate::shared::Daemon;
use jsonrpsee::core::{async_trait, RpcResult, SubscriptionResult};
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::{PendingSubscriptionSink, SubscriptionSink};
use procd_core::output::budget::chars_budget;
use procd_core::{Error, ListPage};
use procd_proto::{
    CloseTerminalResult, Cols, Cursor, DownResult, DrainResult, Event, GraceS, HasActiveResult,
    KillResult, KilledCount, Limit, ListFilter, ListLimit, ListResult, LogResult, MaxActiveAgeS,
    MaxBytes, MaxOutputChars, MaxOutputTokens, Offset, OutputItem, PollResult, Port, PortResult,
    ProcdApiServer, ProjectName, ReadResult, ResizeResult, Rows, SearchResult, SessionName,
    ShutdownResult, SignalResult, SignalSpec, SnapshotResult, SpawnParams, SpawnResult,
    StatusResult, StdinResult, StreamedEvent, TimeoutS, UpResult, UpdateResult, WaitAnyResult,
    WaitCondition, WaitMs, WaitResult, YieldMs,
};
use procd_proto::{
    SandboxSpec, ShellCloseResult, ShellCommandResult, ShellCommandsResult, ShellOpenResult,
};
use std::collections::BTreeMap;
use std::sync::Arc;

fn budget_of(chars: Option<MaxOutputChars>, tokens: Option<MaxOutputTokens>) -> Option<usize> {
    chars_budget(
        chars.map(MaxOutputChars::get),
        tokens.map(MaxOutputTokens::get),
    )
}

pub struct Api {
    pub daemon: Arc<Daemon>,
}

fn streamed(seq: Option<u64>, event: Event) -> StreamedEvent {
    StreamedEvent { seq, event }
}

fn rpc_err(e: Error) -> ErrorObjectOwned {
    procd_proto::error::rpc_error(e.code(), e.message())
}

impl Api {
    /// `spawn` (docs/protocol.md): registered beside the generated table, since
    /// its params are one `SpawnParams` (see `methods`).
    pub async fn spawn(&self, params: SpawnParams) -> RpcResult<SpawnResult> {
        if let Some(token) = &params.owner {
            if !self.daemon.owner_is_live(token).await {
                return Err(procd_proto::error::invalid_params(format!(
                    "owner: unknown owner {token:?} (no live lease has this token)"
                )));
            }
        }
        self.daemon.registry.spawn(params).await.map_err(rpc_err)
    }

    /// The daemon's method table: the generated one plus `spawn`.
    pub fn methods(self) -> jsonrpsee::RpcModule<Api> {
        let mut module = self.into_rpc();
        let registered = module.register_async_method("spawn", |params, api, _| async move {
            let params: SpawnParams = params.parse()?;
            api.spawn(params).await
        });
        if let Err(e) = registered {
            // Only a name clash fails, and the name is ours: a build bug.
            tracing::error!(%e, "cannot register spawn");
        }
        module
    }
}

#[async_trait]
impl ProcdApiServer for Api {
    async fn poll(
        &self,
        session_id: String,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<PollResult> {
        self.daemon
            .registry
            .poll(&session_id, budget_of(max_output_chars, max_output_tokens))
            .map_err(rpc_err)
    }

    async fn read(
        &self,
        session_id: String,
        cursor: Option<Cursor>,
        max_bytes: Option<MaxBytes>,
        wait_ms: Option<WaitMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ReadResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .registry
            .read(
                &session_id,
                cursor.map(Cursor::get),
                max_bytes.map(MaxBytes::get),
                wait_ms,
                budget,
            )
            .await
            .map_err(rpc_err)
    }

    async fn log(
        &self,
        session_id: String,
        offset: Option<Offset>,
        limit: Option<Limit>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<LogResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .registry
            .log(
                &session_id,
                offset.map(Offset::get),
                limit.map(Limit::get),
                budget,
            )
            .await
            .map_err(rpc_err)
    }

    async fn wait(
        &self,
        session_id: String,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<WaitResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .registry
            .wait(&session_id, timeout_s, budget)
            .await
            .map_err(rpc_err)
    }

    async fn search(
        &self,
        pattern: String,
        session_ids: Option<Vec<String>>,
        session_key: Option<String>,
        ignore_case: Option<bool>,
        before: Option<u32>,
        after: Option<u32>,
        from_cursor: Option<u64>,
        to_cursor: Option<u64>,
        since: Option<String>,
        until: Option<String>,
        max_matches: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<SearchResult> {
        let instant = |name: &str, text: Option<String>| match text {
            None => Ok(None),
            Some(text) => procd_sys::clock::parse_rfc3339(&text)
                .map(Some)
                .ok_or_else(|| {
                    procd_proto::error::invalid_params(format!(
                        "{name}: not an RFC 3339 time: {text:?}"
                    ))
                }),
        };
        let ask = procd_core::registry::SearchAsk {
            session_ids,
            session_key,
            pattern,
            ignore_case: ignore_case.unwrap_or(false),
            before: before.unwrap_or(0),
            after: after.unwrap_or(0),
            from_cursor,
            to_cursor,
            since: instant("since", since)?,
            until: instant("until", until)?,
            max_matches,
            budget: budget_of(max_output_chars, max_output_tokens),
        };
        self.daemon.registry.search(ask).await.map_err(rpc_err)
    }

    async fn shell_open(
        &self,
        name: Option<SessionName>,
        cwd: Option<String>,
        env: Option<BTreeMap<String, String>>,
        pty: Option<bool>,
        sandbox: Option<SandboxSpec>,
        owner: Option<String>,
        session_key: Option<String>,
        task_id: Option<String>,
    ) -> RpcResult<ShellOpenResult> {
        if let Some(token) = &owner {
            if !self.daemon.owner_is_live(token).await {
                return Err(procd_proto::error::invalid_params(format!(
                    "owner: unknown owner {token:?} (no live lease has this token)"
                )));
            }
        }
        let ask = procd_core::shell::OpenAsk {
            name,
            cwd,
            env,
            pty,
            sandbox,
            owner,
            session_key,
            task_id,
        };
        self.daemon.shells.open(ask).await.map_err(rpc_err)
    }

    async fn shell_run(
        &self,
        shell_id: String,
        command: String,
        yield_ms: Option<YieldMs>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult> {
        let ask = procd_core::shell::RunAsk {
            shell_id,
            command,
            yield_for: yield_ms.map(YieldMs::duration),
            timeout: timeout_s.map(TimeoutS::duration),
            budget: budget_of(max_output_chars, max_output_tokens),
        };
        self.daemon.shells.run(ask).await.map_err(rpc_err)
    }

    async fn shell_wait(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult> {
        let timeout = timeout_s.map_or(std::time::Duration::from_secs(300), TimeoutS::duration);
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .shells
            .wait(&shell_id, command_id, timeout, budget)
            .await
            .map_err(rpc_err)
    }

    async fn shell_read(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .shells
            .read(&shell_id, command_id, budget)
            .await
            .map_err(rpc_err)
    }

    async fn shell_interrupt(
        &self,
        shell_id: String,
        command_id: Option<u64>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<ShellCommandResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .shells
            .interrupt(&shell_id, command_id, budget)
            .await
            .map_err(rpc_err)
    }

    async fn shell_commands(&self, shell_id: String) -> RpcResult<ShellCommandsResult> {
        self.daemon.shells.commands(&shell_id).map_err(rpc_err)
    }

    async fn shell_close(&self, shell_id: String) -> RpcResult<ShellCloseResult> {
        self.daemon.shells.close(&shell_id).await.map_err(rpc_err)
    }

    async fn wait_any(
        &self,
        session_ids: Option<Vec<String>>,
        session_key: Option<String>,
        until: Option<Vec<WaitCondition>>,
        output: Option<String>,
        cursors: Option<BTreeMap<String, u64>>,
        timeout_s: Option<TimeoutS>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<WaitAnyResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        let ask = procd_core::registry::WaitAnyAsk {
            session_ids,
            session_key,
            until,
            output,
            cursors,
            timeout_s,
            budget,
        };
        self.daemon.registry.wait_any(ask).await.map_err(rpc_err)
    }

    async fn kill(
        &self,
        session_id: String,
        signal: Option<SignalSpec>,
        grace_s: Option<GraceS>,
        source: Option<String>,
    ) -> RpcResult<KillResult> {
        self.daemon
            .registry
            .kill(&session_id, signal, grace_s, source.as_deref())
            .await
            .map_err(rpc_err)
    }

    async fn update(
        &self,
        session_id: String,
        notify_on_complete: Option<bool>,
        watch_patterns: Option<Vec<String>>,
        meta: Option<serde_json::Value>,
    ) -> RpcResult<UpdateResult> {
        self.daemon
            .registry
            .update(&session_id, notify_on_complete, watch_patterns, meta)
            .await
            .map_err(rpc_err)
    }

    async fn signal(&self, session_id: String, signal: SignalSpec) -> RpcResult<SignalResult> {
        self.daemon
            .registry
            .signal(&session_id, signal)
            .await
            .map_err(rpc_err)
    }

    async fn write_stdin(
        &self,
        session_id: String,
        data: String,
        yield_ms: Option<YieldMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<StdinResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .registry
            .write_stdin(&session_id, &data, false, yield_ms, budget)
            .await
            .map_err(rpc_err)
    }

    async fn submit_stdin(
        &self,
        session_id: String,
        data: String,
        yield_ms: Option<YieldMs>,
        max_output_chars: Option<MaxOutputChars>,
        max_output_tokens: Option<MaxOutputTokens>,
    ) -> RpcResult<StdinResult> {
        let budget = budget_of(max_output_chars, max_output_tokens);
        self.daemon
            .registry
            .write_stdin(&session_id, &data, true, yield_ms, budget)
            .await
            .map_err(rpc_err)
    }

    async fn close_stdin(&self, session_id: String) -> RpcResult<StdinResult> {
        self.daemon
            .registry
            .close_stdin(&session_id)
            .await
            .map_err(rpc_err)
    }

    async fn resize(&self, session_id: String, rows: Rows, cols: Cols) -> RpcResult<ResizeResult> {
        self.daemon
            .registry
            .resize(&session_id, rows, cols)
            .await
            .map_err(rpc_err)?;
        Ok(ResizeResult {
            status: "ok".into(),
            rows: rows.get(),
            cols: cols.get(),
        })
    }

    async fn close_terminal(&self, session_id: String) -> RpcResult<CloseTerminalResult> {
        self.daemon
            .registry
            .close_terminal(&session_id)
            .map_err(rpc_err)
    }

    async fn subscribe_output(
        &self,
        pending: PendingSubscriptionSink,
        session_id: String,
        cursor: Option<Cursor>,
    ) -> SubscriptionResult {
        let registry = self.daemon.registry.clone();
        let session = match registry.find(&session_id) {
            Ok(s) => s,
            Err(e) => {
                pending.reject(rpc_err(e)).await;
                return Ok(());
            }
        };
        let sink = pending.accept().await?;
        let mut cursor = cursor.map_or(0, Cursor::get);
        loop {
            // The same window rules as `read`; a slow subscriber only falls
            // behind by cursor, it never holds up ingestion.
            let read = tokio::select! {
                r = registry.read(&session.id, Some(cursor), None, Some(WaitMs::new(LONG_POLL_MS)), None) => r,
                _ = sink.closed() => return Ok(()),
            };
            let Ok(r) = read else { return Ok(()) };
            if !r.data.is_empty() || r.dropped > 0 {
                let item = OutputItem::Output {
                    data: r.data,
                    cursor: r.cursor,
                    next_cursor: r.next_cursor,
                    dropped: r.dropped,
                };
                send(&sink, &item).await?;
            }
            cursor = r.next_cursor;
            if r.eof {
                let exit = registry.poll(&session.id, None).ok().and_then(|p| p.exit);
                let item = OutputItem::Exit {
                    exited: true,
                    exit_code: exit.as_ref().and_then(|e| e.exit_code),
                    signal: exit.as_ref().and_then(|e| e.signal.clone()),
                    completion_reason: exit.map(|e| e.completion_reason),
                };
                send(&sink, &item).await?;
                return Ok(());
            }
        }
    }

    async fn subscribe_events(
        &self,
        pending: PendingSubscriptionSink,
        since: Option<u64>,
    ) -> SubscriptionResult {
        // Subscribe before accepting, so nothing queued meanwhile is missed.
        let queue = self.daemon.registry.notifications();
        let procd_core::notify::Resumed {
            kept,
            missed,
            live: mut events,
        } = match since {
            Some(since) => queue.follow(since),
            None => procd_core::notify::Resumed {
                kept: Vec::new(),
                missed: 0,
                live: queue.subscribe(),
            },
        };
        let sink = pending.accept().await?;
        if missed > 0 {
            send(&sink, &streamed(None, Event::Lagged { missed })).await?;
        }
        for (seq, event) in kept {
            send(&sink, &streamed(Some(seq), event)).await?;
        }
        loop {
            let event = tokio::select! {
                e = events.recv() => e,
                _ = sink.closed() => return Ok(()),
            };
            match event {
                Ok((seq, event)) => send(&sink, &streamed(seq, event)).await?,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    send(&sink, &streamed(None, Event::Lagged { missed })).await?;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }

    async fn list(
        &self,
        task_id: Option<String>,
        session_key: Option<String>,
        status: Option<ListFilter>,
        owner: Option<String>,
        limit: Option<ListLimit>,
        after: Option<String>,
    ) -> RpcResult<ListResult> {
        let page = ListPage {
            limit: limit.map(|l| l.get() as usize),
            after: after.as_deref(),
        };
        self.daemon
            .registry
            .list(
                task_id.as_deref(),
                session_key.as_deref(),
                status.unwrap_or_default(),
                owner.as_deref(),
                page,
            )
            .map_err(rpc_err)
    }

    async fn has_active(
        &self,
        task_id: Option<String>,
        session_key: Option<String>,
        max_active_age_s: Option<MaxActiveAgeS>,
        owner: Option<String>,
    ) -> RpcResult<HasActiveResult> {
        Ok(self.daemon.registry.has_active(
            task_id.as_deref(),
            session_key.as_deref(),
            max_active_age_s,
            owner.as_deref(),
        ))
    }

    async fn snapshot_running(&self, task_id: String) -> RpcResult<SnapshotResult> {
        Ok(self.daemon.registry.snapshot_running(&task_id))
    }

    async fn kill_all(
        &self,
        task_id: Option<String>,
        exclude_ids: Option<Vec<String>>,
        source: Option<String>,
        session_key: Option<String>,
        owner: Option<String>,
    ) -> RpcResult<KilledCount> {
        let whose = procd_core::registry::Whose {
            task_id: task_id.as_deref(),
            session_key: session_key.as_deref(),
            owner: owner.as_deref(),
        };
        let killed = self
            .daemon
            .registry
            .kill_all(whose, &exclude_ids.unwrap_or_default(), source.as_deref())
            .await
            .map_err(rpc_err)?;
        Ok(KilledCount { killed })
    }

    async fn kill_started_since(
        &self,
        task_id: String,
        baseline: Vec<String>,
        source: Option<String>,
    ) -> RpcResult<KilledCount> {
        let killed = self
            .daemon
            .registry
            .kill_started_since(&task_id, &baseline, source.as_deref())
            .await;
        Ok(KilledCount { killed })
    }

    async fn drain_notifications(
        &self,
        session_key: Option<String>,
        owned_keys: Option<Vec<String>>,
    ) -> RpcResult<DrainResult> {
        Ok(self
            .daemon
            .registry
            .drain_notifications(session_key.as_deref(), &owned_keys.unwrap_or_default()))
    }

    async fn up(
        &self,
        file: Option<String>,
        dir: Option<String>,
        services: Option<Vec<SessionName>>,
        yield_ms: Option<YieldMs>,
    ) -> RpcResult<UpResult> {
        procd_core::stacks::up::up(
            &self.daemon.registry,
            file.as_deref(),
            dir.as_deref(),
            &services.unwrap_or_default(),
            yield_ms,
        )
        .await
        .map_err(rpc_err)
    }

    async fn down(
        &self,
        project: ProjectName,
        services: Option<Vec<SessionName>>,
    ) -> RpcResult<DownResult> {
        procd_core::stacks::up::down(
            &self.daemon.registry,
            &project,
            &services.unwrap_or_default(),
        )
        .await
        .map_err(rpc_err)
    }

    async fn port(&self, port: Port) -> RpcResult<PortResult> {
        Ok(self.daemon.registry.port_owner(port.get()).await)
    }

    async fn status(&self) -> RpcResult<StatusResult> {
        // Leases change from outside (start promotes, clients come and go).
        self.daemon.refresh_leases().await;
        Ok(self.daemon.status())
    }

    async fn shutdown(&self, _timeout_s: Option<TimeoutS>) -> RpcResult<ShutdownResult> {
        self.daemon.request_shutdown("shutdown request");
        Ok(ShutdownResult {
            status: "stopping".into(),
        })
    }
}

/// How long one internal read of a subscription waits before looping.
const LONG_POLL_MS: f64 = 60_000.0;

async fn send<T: serde::Serialize>(sink: &SubscriptionSink, item: &T) -> SubscriptionResult {
    let raw = serde_json::value::to_raw_value(item)?;
    sink.send(raw).await?;
    Ok(())
}
