//! Stack files (docs/stacks.md): a project's services, read from a
//! `procd.toml` (`[service.NAME]` tables) or a foreman `Procfile`, checked
//! whole — unknown keys, unknown dependencies, cycles — before anything
//! starts, and put in dependency order.

use procd_proto::{Limits, PortAsk, ProjectName, ReadySpec, SessionName, SpawnParams};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The largest stack file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most services one stack may have.
pub const MAX_SERVICES: usize = 256;
/// foreman's first `PORT`, and the step between services.
const PROCFILE_PORT_BASE: u16 = 5000;
const PROCFILE_PORT_STEP: u16 = 100;

/// When a dependency lets its dependent start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// Once it has been started.
    Started,
    /// Once its ready condition is met (at once without one).
    Ready,
    /// Once it has exited 0.
    Completed,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Started => "started",
            Condition::Ready => "ready",
            Condition::Completed => "completed",
        }
    }
}

/// One service: how to spawn it and what it waits for.
#[derive(Debug, Clone)]
pub struct Service {
    pub name: SessionName,
    /// Its spawn, with `name` and `project` set.
    pub spawn: SpawnParams,
    /// The port it is to listen on (`port`, the Procfile's `PORT`, or
    /// `ready.port`), checked for a holder before it starts.
    pub port: Option<u16>,
    pub depends_on: Vec<(SessionName, Condition)>,
}

/// A stack, its services in dependency order (each after all it needs).
#[derive(Debug, Clone)]
pub struct Stack {
    pub project: ProjectName,
    pub file: PathBuf,
    pub services: Vec<Service>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    project: Option<ProjectName>,
    #[serde(default)]
    service: BTreeMap<String, TomlService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlService {
    command: String,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    pty: Option<bool>,
    ready: Option<ReadySpec>,
    port: Option<PortAsk>,
    ports: Option<BTreeMap<String, PortAsk>>,
    #[serde(default)]
    depends_on: BTreeMap<String, Condition>,
    limits: Option<Limits>,
    persist: Option<bool>,
    restart: Option<StackRestart>,
    watch: Option<procd_proto::WatchSpec>,
}

/// A service's `restart`: spawn's object, or just its policy
/// (`restart = "on-failure"`).
struct StackRestart(procd_proto::RestartSpec);

impl<'de> Deserialize<'de> for StackRestart {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = StackRestart;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a policy (\"no\", \"on-failure\", \"always\") or a table with policy, max_restarts, backoff_s and reset_after_s")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<StackRestart, E> {
                let policy = procd_proto::RestartPolicy::parse(v)
                    .map_err(|e| E::custom(format!("restart: {e}")))?;
                Ok(StackRestart(procd_proto::RestartSpec {
                    policy,
                    max_restarts: None,
                    backoff_s: None,
                    reset_after_s: None,
                }))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<StackRestart, A::Error> {
                procd_proto::RestartSpec::deserialize(serde::de::value::MapAccessDeserializer::new(
                    map,
                ))
                .map(StackRestart)
            }
        }
        d.deserialize_any(Either)
    }
}

impl Stack {
    /// Reads the stack of `file`, or of `dir` (its `procd.toml`, else its
    /// `Procfile`). Relative paths are taken from `base`.
    pub fn load(file: Option<&str>, dir: Option<&str>, base: &Path) -> Result<Stack, String> {
        let file = match (file, dir) {
            (Some(_), Some(_)) => return Err("give file or dir, not both".into()),
            (Some(f), None) => base.join(f),
            (None, dir) => {
                let dir = base.join(dir.unwrap_or("."));
                let toml = dir.join("procd.toml");
                let procfile = dir.join("Procfile");
                if toml.is_file() {
                    toml
                } else if procfile.is_file() {
                    procfile
                } else {
                    return Err(format!(
                        "dir: neither procd.toml nor Procfile in {}",
                        dir.display()
                    ));
                }
            }
        };
        let text = read_limited(&file)?;
        let at = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        let dir_name = at
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let is_procfile = file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("Procfile"));
        let (project, services) = if is_procfile {
            (None, procfile(&text, &at)?)
        } else {
            toml_stack(&text, &at).map_err(|e| format!("{}: {e}", file.display()))?
        };
        let project = project.unwrap_or_else(|| ProjectName::from_dir_name(&dir_name));
        let services = services
            .into_iter()
            .map(|mut s| {
                s.spawn.project = Some(project.clone());
                s
            })
            .collect();
        Ok(Stack {
            project,
            services: in_dependency_order(services)?,
            file,
        })
    }

    /// The services `wanted` names and all they depend on, in order; all
    /// of them when `wanted` is empty. An unknown name is an error.
    pub fn select(&self, wanted: &[SessionName]) -> Result<Vec<&Service>, String> {
        if wanted.is_empty() {
            return Ok(self.services.iter().collect());
        }
        let by_name: HashMap<&SessionName, &Service> =
            self.services.iter().map(|s| (&s.name, s)).collect();
        let mut needed: Vec<&SessionName> = Vec::new();
        let mut todo: Vec<&SessionName> = wanted.iter().collect();
        while let Some(name) = todo.pop() {
            let service = by_name.get(name).ok_or_else(|| {
                format!("services: no service {name:?} in {}", self.file.display())
            })?;
            if !needed.contains(&name) {
                needed.push(name);
                todo.extend(service.depends_on.iter().map(|(d, _)| d));
            }
        }
        Ok(self
            .services
            .iter()
            .filter(|s| needed.contains(&&s.name))
            .collect())
    }
}

/// The file's text: a regular file of at most `MAX_FILE_BYTES` (a FIFO or
/// a device would block or never end), opened without blocking.
fn read_limited(file: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file)
        .map_err(|e| format!("file: {}: {e}", file.display()))?;
    let kind = f
        .metadata()
        .map_err(|e| format!("file: {}: {e}", file.display()))?;
    if !kind.is_file() {
        return Err(format!("file: {} is not a regular file", file.display()));
    }
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("file: {}: {e}", file.display()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "file: {} is larger than {MAX_FILE_BYTES} bytes",
            file.display()
        ));
    }
    Ok(text)
}

fn service_name(name: &str, what: &str) -> Result<SessionName, String> {
    SessionName::parse(name).map_err(|e| format!("{what} {name:?}: {e}"))
}

fn toml_stack(text: &str, at: &Path) -> Result<(Option<ProjectName>, Vec<Service>), String> {
    let parsed: TomlFile = toml::from_str(text).map_err(|e| e.to_string())?;
    if parsed.service.len() > MAX_SERVICES {
        return Err(format!("more than {MAX_SERVICES} services"));
    }
    let mut services = Vec::new();
    for (name, s) in parsed.service {
        let name = service_name(&name, "service")?;
        let depends_on = s
            .depends_on
            .into_iter()
            .map(|(d, c)| Ok((service_name(&d, &format!("service {name}: depends_on"))?, c)))
            .collect::<Result<Vec<_>, String>>()?;
        let mut env = s.env.unwrap_or_default();
        let fixed = match s.port {
            Some(PortAsk::Number(n)) => Some(n.get()),
            Some(PortAsk::Auto) if env.contains_key("PORT") => {
                return Err(format!(
                    "service {name}: port = \"auto\" beside env PORT; give one of them"
                ))
            }
            _ => None,
        };
        if let Some(port) = fixed {
            env.entry("PORT".into()).or_insert_with(|| port.to_string());
        }
        let auto = (s.port == Some(PortAsk::Auto)).then_some(PortAsk::Auto);
        if let Some(both) = s.ports.iter().flatten().find(|(n, _)| env.contains_key(*n)) {
            return Err(format!(
                "service {name}: ports.{} beside env {}; give one of them",
                both.0, both.0
            ));
        }
        let port = fixed.or_else(|| s.ready.as_ref().and_then(ready_port));
        services.push(Service {
            spawn: SpawnParams {
                command: s.command,
                cwd: Some(at.join(s.cwd.unwrap_or_default()).display().to_string()),
                env: Some(env),
                pty: s.pty,
                ready: s.ready,
                limits: s.limits,
                persist: s.persist,
                name: Some(name.clone()),
                restart: s.restart.map(|r| r.0),
                port: auto,
                ports: s.ports,
                watch: s.watch,
                ..Default::default()
            },
            name,
            port,
            depends_on,
        });
    }
    Ok((parsed.project, services))
}

/// The port a ready condition names, if it names one.
pub fn ready_port(ready: &ReadySpec) -> Option<u16> {
    match ready.port? {
        procd_proto::ReadyPort::Number(n) => u16::try_from(n).ok().filter(|&n| n > 0),
        procd_proto::ReadyPort::Any(_) => None,
    }
}

/// foreman's format: `name: command` lines, `#` comments; each service
/// gets `PORT` = 5000, 5100, … in file order.
fn procfile(text: &str, at: &Path) -> Result<Vec<Service>, String> {
    let mut services: Vec<Service> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, command)) = line.split_once(':') else {
            return Err(format!(
                "Procfile line {}: expected \"name: command\"",
                n + 1
            ));
        };
        let name = service_name(name.trim(), &format!("Procfile line {}: name", n + 1))?;
        if services.iter().any(|s| s.name == name) {
            return Err(format!("Procfile line {}: {name} is listed twice", n + 1));
        }
        if services.len() >= MAX_SERVICES {
            return Err(format!("Procfile: more than {MAX_SERVICES} services"));
        }
        let port = u16::try_from(services.len())
            .ok()
            .and_then(|i| i.checked_mul(PROCFILE_PORT_STEP))
            .and_then(|step| step.checked_add(PROCFILE_PORT_BASE));
        let mut env = BTreeMap::new();
        if let Some(port) = port {
            env.insert("PORT".to_string(), port.to_string());
        }
        services.push(Service {
            spawn: SpawnParams {
                command: command.trim().to_string(),
                cwd: Some(at.display().to_string()),
                env: Some(env),
                name: Some(name.clone()),
                ..Default::default()
            },
            name,
            port,
            depends_on: Vec::new(),
        });
    }
    if services.is_empty() {
        return Err("Procfile: no services".into());
    }
    Ok(services)
}

/// Orders services so that each comes after what it depends on (file
/// order otherwise); an unknown dependency or a cycle is an error naming
/// it.
fn in_dependency_order(services: Vec<Service>) -> Result<Vec<Service>, String> {
    let index: HashMap<SessionName, usize> = services
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), i))
        .collect();
    for s in &services {
        for (dep, _) in &s.depends_on {
            if !index.contains_key(dep) {
                return Err(format!(
                    "service {}: depends_on names an unknown service {dep:?}",
                    s.name
                ));
            }
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Visiting,
        Done,
    }
    let mut marks = vec![Mark::New; services.len()];
    let mut order: Vec<usize> = Vec::with_capacity(services.len());
    // Depth first, with an explicit stack (a hostile file may nest deep):
    // (service, next dependency to look at).
    for root in 0..services.len() {
        if marks[root] != Mark::New {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        marks[root] = Mark::Visiting;
        while let Some(&mut (at, ref mut next)) = path.last_mut() {
            match services[at].depends_on.get(*next) {
                Some((dep, _)) => {
                    *next += 1;
                    let dep = index[dep];
                    match marks[dep] {
                        Mark::Done => {}
                        Mark::New => {
                            marks[dep] = Mark::Visiting;
                            path.push((dep, 0));
                        }
                        Mark::Visiting => {
                            let from = path.iter().position(|(i, _)| *i == dep).unwrap_or(0);
                            let mut cycle: Vec<&str> = path[from..]
                                .iter()
                                .map(|(i, _)| services[*i].name.as_str())
                                .collect();
                            cycle.push(services[dep].name.as_str());
                            return Err(format!("a dependency cycle: {}", cycle.join(" -> ")));
                        }
                    }
                }
                None => {
                    marks[at] = Mark::Done;
                    order.push(at);
                    path.pop();
                }
            }
        }
    }
    let mut slots: Vec<Option<Service>> = services.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, name: &str) -> Result<Stack, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), text).unwrap();
        Stack::load(None, Some(dir.path().to_str().unwrap()), Path::new("/"))
    }

    fn names(stack: &Stack) -> Vec<&str> {
        stack.services.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn services_come_after_what_they_depend_on() {
        let stack = load(
            r#"
project = "shop"
[service.web]
command = "web"
depends_on = { db = "ready", migrate = "completed" }
[service.migrate]
command = "migrate"
depends_on = { db = "ready" }
[service.db]
command = "db"
ready = { port = 5432 }
"#,
            "procd.toml",
        )
        .unwrap();
        assert_eq!(stack.project.as_str(), "shop");
        assert_eq!(names(&stack), ["db", "migrate", "web"]);
        assert_eq!(stack.services[0].port, Some(5432));
        let picked: Vec<&str> = stack
            .select(&[SessionName::parse("migrate").unwrap()])
            .unwrap()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(picked, ["db", "migrate"]);
        assert!(stack
            .select(&[SessionName::parse("nope").unwrap()])
            .unwrap_err()
            .contains("\"nope\""));
    }

    #[test]
    fn a_cycle_or_an_unknown_service_is_named() {
        let cycle = load(
            "[service.a]\ncommand='a'\ndepends_on={b='started'}\n[service.b]\ncommand='b'\ndepends_on={c='ready'}\n[service.c]\ncommand='c'\ndepends_on={a='ready'}\n",
            "procd.toml",
        )
        .unwrap_err();
        assert!(cycle.contains("a -> b -> c -> a"), "{cycle}");
        let unknown = load(
            "[service.a]\ncommand='a'\ndepends_on={ghost='started'}\n",
            "procd.toml",
        )
        .unwrap_err();
        assert!(unknown.contains("\"ghost\""), "{unknown}");
        let key = load("[service.a]\ncommand='a'\nrestrat='no'\n", "procd.toml").unwrap_err();
        assert!(key.contains("restrat"), "{key}");
    }

    #[test]
    fn a_procfile_gets_foremans_ports() {
        let stack = load(
            "# the app\nweb: python3 -m http.server $PORT\nworker: ./work\n",
            "Procfile",
        )
        .unwrap();
        assert_eq!(names(&stack), ["web", "worker"]);
        let ports: Vec<_> = stack.services.iter().map(|s| s.port).collect();
        assert_eq!(ports, [Some(5000), Some(5100)]);
        assert_eq!(
            stack.services[1].spawn.env.as_ref().unwrap()["PORT"],
            "5100"
        );
        assert!(load("web python3\n", "Procfile")
            .unwrap_err()
            .contains("line 1"));
    }
}
