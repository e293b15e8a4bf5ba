use super::*;

fn entry(id: &str, exit_code: Option<i32>) -> CheckpointEntry {
    let mut v = serde_json::json!({
        "session_id": id, "command": "true", "pid": 1, "start_time": 1, "pgid": 1,
        "cwd": "/", "started_at": "2026-01-01T00:00:00Z", "log_path": "/x.log",
    });
    if let Some(code) = exit_code {
        v["exit"] = serde_json::json!({
            "exit_code": code, "signal": null, "completion_reason": "exited",
            "exited_at": "2026-01-01T00:00:01Z",
        });
    }
    serde_json::from_value(v).expect("an entry")
}

/// Only a restarting session in its backoff has a next run, and only
/// a root started after the recorded one can be it; it takes the
/// run's count and leaves the backoff.
#[test]
fn a_next_run_is_only_of_a_backoff_and_a_later_root() {
    use procd_sys::identity::ProcessIdentity;
    let mut e = entry("proc_000000000001", None);
    e.start_time = 100;
    let later = ProcessIdentity {
        pid: 42,
        start_time: 200,
    };
    assert!(e.as_next_run(later).is_none(), "no restart policy");
    let mut record: RestartRecord = serde_json::from_value(serde_json::json!({
        "policy": {"policy": "always"}, "run": 1, "streak": 0,
    }))
    .expect("a record");
    e.restart = Some(record.clone());
    assert!(e.as_next_run(later).is_none(), "not in a backoff");
    record.next_run = Some(NextRunRecord {
        run: 2,
        streak: 1,
        at: "2026-01-01T00:00:02Z".into(),
    });
    e.restart = Some(record);
    let earlier = ProcessIdentity {
        pid: 42,
        start_time: 100,
    };
    assert!(e.as_next_run(earlier).is_none(), "not started after it");
    let next = e.as_next_run(later).expect("the next run");
    assert_eq!((next.pid, next.pgid, next.start_time), (42, 42, 200));
    // 100 ticks after the recorded run's start.
    let ticks = procd_sys::procfs::clock_ticks_per_second();
    let after = next
        .started_at()
        .duration_since(e.started_at())
        .expect("later");
    assert!(
        (after.as_secs_f64() - 100.0 / ticks).abs() < 0.002,
        "{}",
        next.started_at
    );
    let r = next.restart.expect("restart");
    assert_eq!((r.run, r.streak, r.next_run), (2, 1, None));
    let mut ended = e.clone();
    ended.exit = entry("proc_000000000001", Some(0)).exit;
    assert!(ended.as_next_run(later).is_none(), "it ended");
}

fn ids(path: &Path) -> Vec<String> {
    let (entries, _) = Checkpoint::read(path);
    entries.into_iter().map(|e| e.session_id).collect()
}

fn ended_ids(checkpoint: &Checkpoint) -> Vec<String> {
    Checkpoint::read_ended(checkpoint.path())
        .into_iter()
        .map(|e| e.session_id)
        .collect()
}

/// Sessions as a registry keeps them for the checkpoint: all of them,
/// which are settled, which went.
#[derive(Default)]
struct Sessions {
    all: std::sync::Mutex<Vec<CheckpointEntry>>,
    settled: std::sync::Mutex<std::collections::HashSet<String>>,
    gone: std::sync::Mutex<Vec<String>>,
}

impl Sessions {
    fn of(all: Vec<CheckpointEntry>) -> Sessions {
        let s = Sessions::default();
        *s.all.lock().unwrap() = all;
        s
    }

    fn add(&self, e: CheckpointEntry) {
        self.all.lock().unwrap().push(e);
    }

    /// Takes out the first `n`.
    fn remove_first(&self, n: usize) {
        let out: Vec<CheckpointEntry> = self.all.lock().unwrap().drain(..n).collect();
        for e in out {
            self.settled.lock().unwrap().remove(&e.session_id);
            self.gone.lock().unwrap().push(e.session_id);
        }
    }
}

impl Sessions {
    fn unsettled_entries(&self) -> Vec<CheckpointEntry> {
        let settled = self.settled.lock().unwrap();
        let all = self.all.lock().unwrap();
        all.iter()
            .filter(|e| !settled.contains(&e.session_id))
            .cloned()
            .collect()
    }
}

impl Recorded for Sessions {
    fn unsettled(&self) -> std::io::Result<Vec<Record>> {
        let entries = self.unsettled_entries();
        Ok(entries.iter().map(|e| Record::of(e).unwrap()).collect())
    }
    fn unsettled_ended(&self) -> Vec<CheckpointEntry> {
        let mut ended = self.unsettled_entries();
        ended.retain(|e| e.exit.is_some());
        ended
    }
    fn ended(&self) -> Vec<CheckpointEntry> {
        let all = self.all.lock().unwrap();
        all.iter().filter(|e| e.exit.is_some()).cloned().collect()
    }
    fn take_gone(&self) -> Vec<String> {
        std::mem::take(&mut self.gone.lock().unwrap())
    }
    fn settle(&self, held: &[(String, String)]) {
        let mut settled = self.settled.lock().unwrap();
        settled.extend(held.iter().map(|(id, _)| id.clone()));
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

/// An ended session is on disk at every moment: in procs.json (with
/// its exit) until ended.jsonl holds it, also when ended.jsonl cannot
/// be written, and a spawn's procs.json write never writes ended.jsonl.
#[tokio::test]
async fn an_ended_session_stays_in_procs_json_until_ended_jsonl_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = Checkpoint::new(dir.path().join("procs.json")).unwrap();
    let ended_path = Checkpoint::ended_path(checkpoint.path());
    let now = Sessions::of(vec![entry("proc_run", None), entry("proc_end", Some(7))]);
    checkpoint.write_running(&now).await.unwrap();
    assert_eq!(ids(checkpoint.path()), ["proc_run", "proc_end"]);
    assert!(!ended_path.exists(), "write_running wrote ended.jsonl");
    let (in_procs, _) = Checkpoint::read(checkpoint.path());
    assert_eq!(in_procs[1].exit.as_ref().and_then(|e| e.exit_code), Some(7));

    checkpoint.write(&now).await.unwrap();
    assert_eq!(ended_ids(&checkpoint), ["proc_end"]);
    assert_eq!(ids(checkpoint.path()), ["proc_run"]);

    // ended.jsonl cannot be written: the next ended session stays in
    // procs.json, the one ended.jsonl already holds does not come back.
    now.add(entry("proc_end2", Some(3)));
    std::fs::remove_file(&ended_path).unwrap();
    std::fs::create_dir(&ended_path).unwrap();
    std::fs::write(ended_path.join("x"), b"").unwrap();
    assert!(checkpoint.write(&now).await.is_err());
    checkpoint.write_running(&now).await.unwrap();
    assert_eq!(ids(checkpoint.path()), ["proc_run", "proc_end2"]);
}

/// An exit is one line appended, a session no longer retained a
/// `gone` line, and the file is rewritten to what is retained only
/// when its lines outgrow twice that: the cost of an exit does not
/// grow with the sessions held.
#[tokio::test]
async fn ended_jsonl_grows_by_a_line_per_change_and_is_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = Checkpoint::new(dir.path().join("procs.json")).unwrap();
    let path = Checkpoint::ended_path(checkpoint.path());
    let sessions = Sessions::of(
        (0..100)
            .map(|i| entry(&format!("proc_{i:012x}"), Some(i)))
            .collect(),
    );
    checkpoint.write(&sessions).await.unwrap();
    assert_eq!(lines(&path), 100, "the first write is whole");
    sessions.add(entry("proc_00000000ffff", Some(1)));
    checkpoint.write(&sessions).await.unwrap();
    assert_eq!(lines(&path), 101, "one exit, one line");
    sessions.remove_first(1);
    checkpoint.write(&sessions).await.unwrap();
    assert_eq!(lines(&path), 102, "one gone, one line");
    let read = ended_ids(&checkpoint);
    assert_eq!(read.len(), 100);
    assert!(!read.contains(&"proc_000000000000".to_string()), "{read:?}");
    assert_eq!(read.last().map(String::as_str), Some("proc_00000000ffff"));
    // Down to 10 retained: 90 gone lines would make 192 > 2 * 10 + 64.
    sessions.remove_first(90);
    checkpoint.write(&sessions).await.unwrap();
    assert_eq!(lines(&path), 10, "rewritten to what is retained");
    assert_eq!(ended_ids(&checkpoint).len(), 10);
}

/// A `gone` line takes back what came before it, not what comes after:
/// an id whose next run ended is held again.
#[tokio::test]
async fn a_next_run_after_gone_is_held_again() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = Checkpoint::new(dir.path().join("procs.json")).unwrap();
    let sessions = Sessions::of(vec![entry("proc_000000000001", Some(1))]);
    checkpoint.write(&sessions).await.unwrap();
    // Its next run, which ended too (the registry replaced it).
    sessions.remove_first(1);
    sessions.add(entry("proc_000000000001", Some(2)));
    checkpoint.write(&sessions).await.unwrap();
    let held = Checkpoint::read_ended(checkpoint.path());
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].exit.as_ref().and_then(|e| e.exit_code), Some(2));
}

/// A line a crash cut short is skipped, and the next append starts on a
/// line of its own; an `ended.json` of a daemon before the journal is
/// read, and removed once the journal is rewritten whole.
#[tokio::test]
async fn a_torn_line_and_a_legacy_file_are_read_past() {
    let dir = tempfile::tempdir().unwrap();
    let procs = dir.path().join("procs.json");
    let legacy = [entry("proc_000000000001", Some(1))];
    std::fs::write(
        dir.path().join("ended.json"),
        serde_json::to_vec(&legacy).unwrap(),
    )
    .unwrap();
    let checkpoint = Checkpoint::new(procs.clone()).unwrap();
    assert_eq!(ended_ids(&checkpoint), ["proc_000000000001"]);
    let sessions = Sessions::of(legacy.to_vec());
    checkpoint.write(&sessions).await.unwrap();
    assert!(
        !dir.path().join("ended.json").exists(),
        "held in the journal now"
    );
    let path = Checkpoint::ended_path(&procs);
    let mut torn = std::fs::read(&path).unwrap();
    torn.extend_from_slice(br#"{"session_id":"proc_00000000000"#);
    std::fs::write(&path, &torn).unwrap();
    sessions.add(entry("proc_000000000002", Some(2)));
    checkpoint.write(&sessions).await.unwrap();
    assert_eq!(
        ended_ids(&checkpoint),
        ["proc_000000000001", "proc_000000000002"]
    );
}

#[test]
fn a_record_is_made_again_only_when_its_session_changed() {
    let mut cache: RecordCache<u8, u32> = RecordCache::default();
    let made = std::cell::Cell::new(0);
    let record = |cache: &mut RecordCache<u8, u32>, owner: &Arc<u8>, moving: u32| {
        cache
            .record(owner, moving, || {
                made.set(made.get() + 1);
                entry("proc_000000000001", Some(made.get()))
            })
            .unwrap()
            .json
    };
    let first = Arc::new(1u8);
    cache.begin();
    let a = record(&mut cache, &first, 7);
    assert_eq!(made.get(), 1);
    cache.begin();
    assert_eq!(
        record(&mut cache, &first, 7),
        a,
        "the same session, unchanged"
    );
    assert_eq!(made.get(), 1);
    let b = record(&mut cache, &first, 8);
    assert_eq!(made.get(), 2, "what can change changed");
    assert_ne!(a, b);
    // Another session under the same id (a restart's next run), however
    // alike, has a record of its own.
    let next = Arc::new(1u8);
    record(&mut cache, &next, 8);
    assert_eq!(made.get(), 3);
    let parsed: CheckpointEntry = serde_json::from_str(&b).unwrap();
    assert_eq!(parsed.exit.unwrap().exit_code, Some(2));
}

#[test]
fn records_no_write_visits_are_dropped_once_they_outnumber_the_rest() {
    let mut cache: RecordCache<u8, ()> = RecordCache::default();
    let owners: Vec<Arc<u8>> = (0..200).map(|_| Arc::new(0u8)).collect();
    let make = |cache: &mut RecordCache<u8, ()>, n: usize| {
        for (i, owner) in owners.iter().enumerate().take(n) {
            let id = format!("proc_{i:012x}");
            cache.record(owner, (), || entry(&id, None)).unwrap();
        }
    };
    cache.begin();
    make(&mut cache, 200);
    cache.trim(200);
    assert_eq!(cache.by_owner.len(), 200);
    // One session left: the 199 others go once they pass twice it plus
    // the slack.
    cache.begin();
    make(&mut cache, 1);
    cache.trim(1);
    assert_eq!(cache.by_owner.len(), 1);
}

#[tokio::test]
async fn procs_json_is_the_records_as_one_array() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("procs.json");
    let checkpoint = Checkpoint::new(path.clone()).unwrap();
    let sessions = Sessions::default();
    sessions.add(entry("proc_000000000001", None));
    sessions.add(entry("proc_000000000002", None));
    checkpoint.write_running(&sessions).await.unwrap();
    let (read, skipped) = Checkpoint::read(&path);
    assert_eq!(skipped, 0);
    assert_eq!(read, sessions.unsettled_entries());
    assert!(std::fs::read_to_string(&path).unwrap().ends_with("]\n"));
    let none = Sessions::default();
    checkpoint.write_running(&none).await.unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "[]\n");
}

/// A `procs.json` write of what the file already holds is skipped, and
/// a change is written (a kill waits for the exit to be on disk, which
/// the write its exit scheduled has usually done): in the slot of the
/// session that changed, the file staying where it is (its inode), and
/// whole when the file was replaced behind the daemon's back.
#[tokio::test]
async fn procs_json_is_written_where_it_changed_and_not_again_unchanged() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("procs.json");
    let checkpoint = Checkpoint::new(path.clone()).unwrap();
    let inode = || std::fs::metadata(&path).unwrap().ino();
    let sessions = Sessions::default();
    sessions.add(entry("proc_000000000001", None));
    checkpoint.write_running(&sessions).await.unwrap();
    let first = inode();
    // Changed behind the daemon's back, in place and to the same size:
    // a write of the same records leaves it as it is.
    let bytes = std::fs::read(&path).unwrap();
    let mut plant = vec![b' '; bytes.len() - 3];
    plant.extend_from_slice(b"[]\n");
    std::fs::write(&path, plant).unwrap();
    checkpoint.write_running(&sessions).await.unwrap();
    assert_eq!(inode(), first);
    assert_eq!(
        Checkpoint::read(&path).0,
        [],
        "the same records were written again"
    );
    // Truncated: written whole.
    std::fs::write(&path, b"[]\n").unwrap();
    sessions.add(entry("proc_000000000004", None));
    checkpoint.write_running(&sessions).await.unwrap();
    assert_eq!(Checkpoint::read(&path).0, sessions.unsettled_entries());
    // Removed: written whole.
    std::fs::remove_file(&path).unwrap();
    sessions.add(entry("proc_000000000002", None));
    checkpoint.write_running(&sessions).await.unwrap();
    assert_eq!(Checkpoint::read(&path).0, sessions.unsettled_entries());
    let whole = inode();
    sessions.add(entry("proc_000000000003", None));
    checkpoint.write_running(&sessions).await.unwrap();
    assert_eq!(inode(), whole, "a session added was not written in place");
    assert_eq!(Checkpoint::read(&path).0, sessions.unsettled_entries());
}
