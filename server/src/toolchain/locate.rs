//! Finding NVRTC, ptxas and the CUDA headers on this machine.
//!
//! Two layouts matter: a CUDA toolkit (`/usr/local/cuda`, `$CUDA_HOME`: `lib64/`,
//! `bin/`, `include/`, and in CUDA 13 `include/cccl/`) and pip wheels in a Python
//! environment (`nvidia/cuda_nvrtc/lib`, `nvidia/cuda_nvcc/bin`,
//! `nvidia/cuda_runtime/include`, `nvidia/cuda_cccl/include` for CUDA 12; everything
//! under `nvidia/cu13/` for CUDA 13). ptxas and headers are looked for next to the NVRTC
//! that was found first, so the three come from one CUDA release when possible (ptxas
//! rejects PTX from a newer NVRTC).
//!
//! Where to look is a [`SearchEnv`]; [`SearchEnv::from_process`] reads the real
//! environment, tests build their own. Nothing here panics or fails hard: a missing
//! tool is a [`ToolError`] in the [`Toolchain`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::nvrtc::Nvrtc;
use super::process::run_with_timeout;
use super::ToolError;

/// The user's toolchain settings (`kernel-lsp.nvrtcPath` and friends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ToolchainSettings {
    /// libnvrtc itself, or a folder holding it (or a CUDA root with `lib64/`).
    pub nvrtc_path: Option<PathBuf>,
    /// ptxas itself, or a folder holding it.
    pub ptxas_path: Option<PathBuf>,
    /// The folder holding `cuda_fp16.h`.
    pub cuda_include: Option<PathBuf>,
    /// The GPU to compile for, `sm_90` by default.
    pub arch: String,
    /// nvcc itself, or a folder holding it (or a CUDA root).
    pub nvcc_path: Option<PathBuf>,
    /// Check files with nvcc when one is found (the ground truth: the project's own
    /// compiler and flags); `false` checks with NVRTC only.
    pub use_nvcc: bool,
}

impl Default for ToolchainSettings {
    fn default() -> Self {
        Self {
            nvrtc_path: None,
            ptxas_path: None,
            cuda_include: None,
            arch: "sm_90".to_string(),
            nvcc_path: None,
            use_nvcc: true,
        }
    }
}

/// What was found. Cheap to build again with [`locate`]: the Python probe and loaded
/// libraries are cached for the process.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub nvrtc: Result<Nvrtc, ToolError>,
    pub ptxas: Option<PathBuf>,
    /// The CUDA headers (`cuda_fp16.h`) and, where separate, CCCL (`nv/target`, needed
    /// by `cooperative_groups.h`).
    pub include_dirs: Vec<PathBuf>,
    pub arch: String,
    /// nvcc with its front end (`nvvm/bin/cicc`) and a host compiler: files are checked
    /// with it ([`super::nvcc`]); `None` checks with NVRTC alone.
    pub nvcc: Option<PathBuf>,
    /// Things worth telling the author: a setting that pointed nowhere, ptxas or headers
    /// not found (with what was searched).
    pub notes: Vec<String>,
}

impl Toolchain {
    /// A toolchain with nothing in it, for when locating itself failed (e.g. the
    /// search thread died); `why` becomes the NVRTC error the author sees.
    pub fn unavailable(why: String) -> Self {
        Toolchain {
            nvrtc: Err(ToolError::Io {
                what: "locating NVRTC".into(),
                reason: why,
            }),
            ptxas: None,
            include_dirs: Vec::new(),
            arch: String::new(),
            nvcc: None,
            notes: Vec::new(),
        }
    }
}

/// Where to look, in order. Built from the process environment by
/// [`SearchEnv::from_process`]; tests build one that does not depend on the machine.
#[derive(Debug, Clone, Default)]
pub struct SearchEnv {
    /// `KERNEL_LSP_NVRTC`: a file or folder.
    pub nvrtc_env: Option<PathBuf>,
    /// `KERNEL_LSP_PTXAS`: a file or folder.
    pub ptxas_env: Option<PathBuf>,
    /// `KERNEL_LSP_NVCC`: a file or folder; `none` turns nvcc checking off.
    pub nvcc_env: Option<PathBuf>,
    /// CUDA installs, in order: `$CUDA_PATH`, `$CUDA_HOME`, `/usr/local/cuda`,
    /// `/usr/local/cuda-*` (newest first), `/opt/cuda`, `$CONDA_PREFIX`.
    pub cuda_roots: Vec<PathBuf>,
    /// `site-packages` folders of the active environment (`$VIRTUAL_ENV`).
    pub site_packages: Vec<PathBuf>,
    /// `sys.path` of `python3`; `None` probes it (once per process) when needed.
    pub python_sys_path: Option<Vec<PathBuf>>,
    /// `$PATH`, for ptxas.
    pub path_dirs: Vec<PathBuf>,
    /// Finally try the system loader with bare names (`libnvrtc.so.12`).
    pub try_loader_names: bool,
}

impl SearchEnv {
    /// The real environment of this process.
    pub fn from_process() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let mut cuda_roots: Vec<PathBuf> = Vec::new();
        cuda_roots.extend(var("CUDA_PATH"));
        cuda_roots.extend(var("CUDA_HOME"));
        cuda_roots.push(PathBuf::from("/usr/local/cuda"));
        cuda_roots.extend(versioned_cuda_dirs(Path::new("/usr/local")));
        cuda_roots.push(PathBuf::from("/opt/cuda"));
        cuda_roots.extend(var("CONDA_PREFIX"));
        let mut site_packages = Vec::new();
        for prefix in [var("VIRTUAL_ENV"), var("CONDA_PREFIX")]
            .into_iter()
            .flatten()
        {
            site_packages.extend(site_packages_of(&prefix));
        }
        let path_dirs = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        Self {
            nvrtc_env: var("KERNEL_LSP_NVRTC"),
            ptxas_env: var("KERNEL_LSP_PTXAS"),
            nvcc_env: var("KERNEL_LSP_NVCC"),
            cuda_roots,
            site_packages,
            python_sys_path: None,
            path_dirs,
            try_loader_names: true,
        }
    }

    /// `site_packages` then python3's `sys.path`, probing Python at most once.
    fn python_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.site_packages.clone();
        let probed;
        let sys_path = match &self.python_sys_path {
            Some(p) => p,
            None => {
                probed = python_sys_path();
                probed
            }
        };
        for p in sys_path {
            if !dirs.contains(p) {
                dirs.push(p.clone());
            }
        }
        dirs
    }
}

/// `/usr/local/cuda-12.4`, `/usr/local/cuda-13.0`, ... newest first.
fn versioned_cuda_dirs(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found: Vec<(Vec<u32>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("cuda-")?;
            let parts: Vec<u32> = version
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            Some((parts, e.path()))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0));
    found.into_iter().map(|(_, p)| p).collect()
}

/// `<prefix>/lib/python3.*/site-packages` (and Windows' `Lib/site-packages`).
fn site_packages_of(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(prefix.join("lib")) {
        let mut pys: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        pys.sort();
        out.extend(pys);
    }
    let win = prefix.join("Lib").join("site-packages");
    if win.is_dir() {
        out.push(win);
    }
    out
}

/// python3's `sys.path`, asked once per process with a 5 s limit; empty if there is no
/// python3 or it misbehaves.
fn python_sys_path() -> &'static Vec<PathBuf> {
    static CACHE: OnceLock<Vec<PathBuf>> = OnceLock::new();
    CACHE.get_or_init(|| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", "import sys;print(\"\\n\".join(sys.path))"]);
        match run_with_timeout(cmd, Duration::from_secs(5), "python3") {
            Ok(done) if done.status.success() => done
                .stdout
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
                .collect(),
            Ok(_) => Vec::new(),
            Err(e) => {
                tracing::debug!("python3 sys.path probe failed: {e}");
                Vec::new()
            }
        }
    })
}

const NVRTC_NAMES: [&str; 3] = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"];

/// Target folder name inside a CUDA root (`targets/x86_64-linux/lib`).
fn target_triple_dir() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "sbsa-linux"
    } else {
        "x86_64-linux"
    }
}

fn root_lib_dirs(root: &Path) -> Vec<PathBuf> {
    vec![
        root.join("lib64"),
        root.join("lib"),
        root.join("targets").join(target_triple_dir()).join("lib"),
    ]
}

fn root_include_dirs(root: &Path) -> Vec<PathBuf> {
    vec![
        root.join("include"),
        root.join("targets")
            .join(target_triple_dir())
            .join("include"),
    ]
}

/// libnvrtc files in `dir`, best first: the unversioned link, CUDA 13, 12, then any
/// other `libnvrtc.so.N` (newest first). `-builtins` and `.alt` variants are not NVRTC.
fn nvrtc_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = NVRTC_NAMES
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.is_file())
        .collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut more: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let major: u32 = name
                    .strip_prefix("libnvrtc.so.")?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()?;
                Some((major, e.path()))
            })
            .filter(|(_, p)| !out.contains(p))
            .collect();
        more.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        out.extend(more.into_iter().map(|(_, p)| p));
    }
    out
}

/// One place searched, described for the error message.
struct Searched(Vec<String>);

impl Searched {
    fn note(&mut self, what: String) {
        if !self.0.contains(&what) {
            self.0.push(what);
        }
    }
}

/// Finds the toolchain as the settings and this process's environment say.
pub fn locate(settings: &ToolchainSettings) -> Toolchain {
    locate_in(settings, &SearchEnv::from_process())
}

/// [`locate`] with an explicit [`SearchEnv`].
pub fn locate_in(settings: &ToolchainSettings, env: &SearchEnv) -> Toolchain {
    let mut notes = Vec::new();
    let arch = if settings.arch.trim().is_empty() {
        ToolchainSettings::default().arch
    } else {
        settings.arch.trim().to_string()
    };
    let nvrtc = find_nvrtc(settings, env, &mut notes);
    let nvrtc_dir = nvrtc
        .as_ref()
        .ok()
        .and_then(|n| n.path().parent().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty());
    let ptxas = find_ptxas(settings, env, nvrtc_dir.as_deref(), &mut notes);
    let include_dirs = find_includes(settings, env, nvrtc_dir.as_deref(), &mut notes);
    let nvcc = find_nvcc(settings, env, &mut notes);
    Toolchain {
        nvrtc,
        ptxas,
        include_dirs,
        arch,
        nvcc,
        notes,
    }
}

/// nvcc, when checking with it is on and one is complete: the driver, its front end
/// (`../nvvm/bin/cicc`) and a host compiler (`g++` on `$PATH`, which nvcc preprocesses
/// with). Searched: the setting, `KERNEL_LSP_NVCC`, the CUDA installs, the pip wheels
/// (`nvidia/cu13/bin`, `nvidia/cuda_nvcc/bin`), `$PATH`.
fn find_nvcc(
    settings: &ToolchainSettings,
    env: &SearchEnv,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    if !settings.use_nvcc {
        return None;
    }
    // `KERNEL_LSP_NVCC=none` stops the search; a path in the settings still counts.
    let search = env.nvcc_env.as_deref() != Some(Path::new("none"));
    if !search && settings.nvcc_path.is_none() {
        return None;
    }
    let exe = exe_name("nvcc");
    let complete = |p: &Path| -> Option<PathBuf> {
        let cands = if p.is_dir() {
            vec![p.join(&exe), p.join("bin").join(&exe)]
        } else {
            vec![p.to_path_buf()]
        };
        cands.into_iter().find(|c| {
            c.is_file()
                && c.parent().and_then(Path::parent).is_some_and(|root| {
                    root.join("nvvm")
                        .join("bin")
                        .join(exe_name("cicc"))
                        .is_file()
                })
        })
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    dirs.extend(settings.nvcc_path.clone());
    if search {
        dirs.extend(env.nvcc_env.clone());
        dirs.extend(env.cuda_roots.iter().map(|r| r.join("bin")));
        for sp in &env.site_packages {
            for sub in ["nvidia/cu13/bin", "nvidia/cuda_nvcc/bin"] {
                dirs.push(sp.join(sub));
            }
        }
        dirs.extend(env.path_dirs.iter().cloned());
    }
    let found = dirs.iter().find_map(|d| complete(d));
    if found.is_none() {
        if let Some(p) = &settings.nvcc_path {
            notes.push(format!(
                "kernel-lsp.nvccPath = {} is not a complete nvcc (it needs ../nvvm/bin/cicc); checking with NVRTC",
                p.display()
            ));
        }
        return None;
    }
    let host = exe_name("g++");
    if !env.path_dirs.iter().any(|d| d.join(&host).is_file()) {
        notes.push(format!(
            "nvcc found at {} but no host compiler (g++) on $PATH, which nvcc needs: checking with NVRTC",
            found.as_ref().map_or(String::new(), |f| f.display().to_string())
        ));
        return None;
    }
    found
}

fn find_nvrtc(
    settings: &ToolchainSettings,
    env: &SearchEnv,
    notes: &mut Vec<String>,
) -> Result<Nvrtc, ToolError> {
    let mut searched = Searched(Vec::new());
    let mut failures: Vec<String> = Vec::new();
    // Loads the first usable libnvrtc in `p` (a file, a folder, or a CUDA root);
    // found-but-broken files are remembered, since that says more than "not found".
    let mut try_path = |p: &Path| -> Option<Nvrtc> {
        let files = if p.is_file() {
            vec![p.to_path_buf()]
        } else if p.is_dir() {
            let mut files = nvrtc_files_in(p);
            for sub in root_lib_dirs(p) {
                files.extend(nvrtc_files_in(&sub));
            }
            files
        } else {
            Vec::new()
        };
        for f in files {
            match Nvrtc::load(&f) {
                Ok(n) => return Some(n),
                Err(e) => failures.push(e.to_string()),
            }
        }
        None
    };

    if let Some(p) = &settings.nvrtc_path {
        if let Some(n) = try_path(p) {
            return Ok(n);
        }
        searched.note(format!("{} (kernel-lsp.nvrtcPath)", p.display()));
        notes.push(format!(
            "kernel-lsp.nvrtcPath = {} has no usable libnvrtc; searching the usual places",
            p.display()
        ));
    }
    if let Some(p) = &env.nvrtc_env {
        if let Some(n) = try_path(p) {
            return Ok(n);
        }
        searched.note(format!("{} (KERNEL_LSP_NVRTC)", p.display()));
    }
    for root in &env.cuda_roots {
        for dir in root_lib_dirs(root) {
            if let Some(n) = try_path(&dir) {
                return Ok(n);
            }
        }
    }
    if !env.cuda_roots.is_empty() {
        searched.note(format!(
            "CUDA installs {} (lib64, lib, targets/{}/lib)",
            list(&env.cuda_roots),
            target_triple_dir()
        ));
    }
    let python_dirs = env.python_dirs();
    for sp in &python_dirs {
        for sub in ["nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"] {
            if let Some(n) = try_path(&sp.join(sub)) {
                return Ok(n);
            }
        }
    }
    if !python_dirs.is_empty() {
        searched.note(format!(
            "pip wheels (nvidia/cuda_nvrtc/lib, nvidia/cu13/lib) in {}",
            list(&python_dirs)
        ));
    }
    if env.try_loader_names {
        for name in NVRTC_NAMES {
            if let Ok(n) = Nvrtc::load(Path::new(name)) {
                return Ok(n);
            }
        }
        searched.note(format!("the system loader ({})", NVRTC_NAMES.join(", ")));
    }
    if let Some(reason) = failures.into_iter().next() {
        searched.note(format!("first load failure: {reason}"));
    }
    Err(ToolError::NvrtcNotFound {
        searched: searched.0,
    })
}

fn list(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(" ")
}

fn exe_name(name: &str) -> String {
    if cfg!(windows) {
        format!("{name}.exe")
    } else {
        name.to_string()
    }
}

fn find_ptxas(
    settings: &ToolchainSettings,
    env: &SearchEnv,
    nvrtc_dir: Option<&Path>,
    notes: &mut Vec<String>,
) -> Option<PathBuf> {
    let exe = exe_name("ptxas");
    let mut searched = Searched(Vec::new());
    let check = |p: &Path, searched: &mut Searched| -> Option<PathBuf> {
        let cands = if p.is_dir() {
            vec![p.join(&exe), p.join("bin").join(&exe)]
        } else {
            vec![p.to_path_buf()]
        };
        let hit = cands.into_iter().find(|c| c.is_file());
        if hit.is_none() {
            searched.note(p.display().to_string());
        }
        hit
    };
    if let Some(p) = &settings.ptxas_path {
        if let Some(hit) = check(p, &mut searched) {
            return Some(hit);
        }
        notes.push(format!(
            "kernel-lsp.ptxasPath = {} is not ptxas; searching the usual places",
            p.display()
        ));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    dirs.extend(env.ptxas_env.clone());
    dirs.extend(nvrtc_dir.map(sibling_bin_dirs).unwrap_or_default());
    dirs.extend(env.cuda_roots.iter().map(|r| r.join("bin")));
    for d in dirs {
        if let Some(hit) = check(&d, &mut searched) {
            return Some(hit);
        }
    }
    for sp in env.python_dirs() {
        for sub in ["nvidia/cuda_nvcc/bin", "nvidia/cu13/bin"] {
            if let Some(hit) = check(&sp.join(sub), &mut searched) {
                return Some(hit);
            }
        }
    }
    for d in &env.path_dirs {
        let c = d.join(&exe);
        if c.is_file() {
            return Some(c);
        }
    }
    searched.note("$PATH".to_string());
    notes.push(format!(
        "ptxas not found, so no register or spill counts (searched: {}). Install the \
         nvidia-cuda-nvcc-cu12 wheel or the CUDA toolkit, or set kernel-lsp.ptxasPath",
        searched.0.join(", ")
    ));
    None
}

/// Folders next to a found NVRTC where its own release's ptxas lives.
fn sibling_bin_dirs(nvrtc_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Some(parent) = nvrtc_dir.parent() else {
        return out;
    };
    // <root>/lib64 → <root>/bin; nvidia/cu13/lib → nvidia/cu13/bin.
    out.push(parent.join("bin"));
    // nvidia/cuda_nvrtc/lib → nvidia/cuda_nvcc/bin.
    if parent.file_name().is_some_and(|n| n == "cuda_nvrtc") {
        if let Some(nvidia) = parent.parent() {
            out.push(nvidia.join("cuda_nvcc").join("bin"));
        }
    }
    // <root>/targets/x86_64-linux/lib → <root>/bin.
    if let Some(root) = parent.parent().and_then(Path::parent) {
        if parent
            .parent()
            .is_some_and(|t| t.file_name().is_some_and(|n| n == "targets"))
        {
            out.push(root.join("bin"));
        }
    }
    out
}

/// Folders next to a found NVRTC where its own release's headers live.
fn sibling_include_dirs(nvrtc_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Some(parent) = nvrtc_dir.parent() else {
        return out;
    };
    out.push(parent.join("include"));
    if parent.file_name().is_some_and(|n| n == "cuda_nvrtc") {
        if let Some(nvidia) = parent.parent() {
            out.push(nvidia.join("cuda_runtime").join("include"));
        }
    }
    if let Some(root) = parent.parent().and_then(Path::parent) {
        if parent
            .parent()
            .is_some_and(|t| t.file_name().is_some_and(|n| n == "targets"))
        {
            out.push(root.join("include"));
        }
    }
    out
}

fn find_includes(
    settings: &ToolchainSettings,
    env: &SearchEnv,
    nvrtc_dir: Option<&Path>,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut searched = Searched(Vec::new());
    let has_cuda = |d: &Path| d.join("cuda_fp16.h").is_file();
    let mut cuda_include: Option<PathBuf> = None;

    if let Some(p) = &settings.cuda_include {
        if has_cuda(p) {
            cuda_include = Some(p.clone());
        } else {
            notes.push(format!(
                "kernel-lsp.cudaInclude = {} has no cuda_fp16.h; searching the usual places",
                p.display()
            ));
        }
    }
    let python_dirs = if cuda_include.is_none() {
        let mut cands: Vec<PathBuf> = Vec::new();
        cands.extend(nvrtc_dir.map(sibling_include_dirs).unwrap_or_default());
        for r in &env.cuda_roots {
            cands.extend(root_include_dirs(r));
        }
        cuda_include = cands.iter().find(|d| has_cuda(d)).cloned();
        for c in &cands {
            searched.note(c.display().to_string());
        }
        if cuda_include.is_none() {
            let pdirs = env.python_dirs();
            for sp in &pdirs {
                for sub in ["nvidia/cuda_runtime/include", "nvidia/cu13/include"] {
                    let d = sp.join(sub);
                    if cuda_include.is_none() {
                        if has_cuda(&d) {
                            cuda_include = Some(d);
                        } else {
                            searched.note(d.display().to_string());
                        }
                    }
                }
            }
            Some(pdirs)
        } else {
            None
        }
    } else {
        None
    };

    let Some(cuda_include) = cuda_include else {
        notes.push(format!(
            "cuda_fp16.h not found, so kernels that include CUDA headers will not compile \
             (searched: {}). Install the nvidia-cuda-runtime-cu12 wheel or the CUDA toolkit, \
             or set kernel-lsp.cudaInclude",
            searched.0.join(", ")
        ));
        return Vec::new();
    };
    let mut dirs = vec![cuda_include.clone()];

    // CCCL (`nv/target`), needed by cooperative_groups.h: inside the CUDA 12 toolkit's
    // include folder, in `include/cccl` for CUDA 13, in its own wheel for pip CUDA 12.
    let has_cccl = |d: &Path| d.join("nv").join("target").is_file();
    if !has_cccl(&cuda_include) {
        let mut cands = vec![cuda_include.join("cccl")];
        if let Some(nvidia) = cuda_include.parent().and_then(Path::parent) {
            cands.push(nvidia.join("cuda_cccl").join("include"));
        }
        let pdirs = python_dirs.unwrap_or_else(|| env.python_dirs());
        for sp in &pdirs {
            cands.push(sp.join("nvidia/cuda_cccl/include"));
            cands.push(sp.join("nvidia/cu13/include/cccl"));
        }
        match cands.into_iter().find(|d| has_cccl(d)) {
            Some(d) => dirs.push(d),
            None => notes.push(
                "CCCL headers (nv/target) not found, so cooperative_groups.h and <cuda/std/...> \
                 will not compile. Install the nvidia-cuda-cccl-cu12 wheel"
                    .to_string(),
            ),
        }
    }

    // `<mma.h>` (WMMA) includes `crt/mma.h`, which CUDA 12's runtime wheel lacks: the
    // nvcc wheel has it (the toolkit and CUDA 13's wheel keep it next to cuda_fp16.h).
    let has_crt = |d: &Path| d.join("crt").join("mma.h").is_file();
    if !dirs.iter().any(|d| has_crt(d)) {
        let mut cands = Vec::new();
        if let Some(nvidia) = cuda_include.parent().and_then(Path::parent) {
            cands.push(nvidia.join("cuda_nvcc").join("include"));
        }
        for sp in env.python_dirs() {
            cands.push(sp.join("nvidia/cuda_nvcc/include"));
        }
        match cands.into_iter().find(|d| has_crt(d)) {
            Some(d) => dirs.push(d),
            None => notes.push(
                "crt/mma.h not found, so <mma.h> (WMMA tensor-core fragments) will not compile. \
                 Install the nvidia-cuda-nvcc-cu12 wheel"
                    .to_string(),
            ),
        }
    }

    // The CUDA math libraries' pip wheels keep their headers apart (curand_kernel.h in
    // nvidia-curand-cu12); the toolkit has them next to cuda_fp16.h.
    let mut libs = Vec::new();
    if let Some(nvidia) = cuda_include.parent().and_then(Path::parent) {
        libs.push(nvidia.to_path_buf());
    }
    libs.extend(env.python_dirs().into_iter().map(|sp| sp.join("nvidia")));
    for lib in ["curand", "cublas", "cufft", "cusparse", "cusolver"] {
        if let Some(d) = libs
            .iter()
            .map(|n| n.join(lib).join("include"))
            .find(|d| d.is_dir())
        {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_default_and_serde() {
        let s: ToolchainSettings =
            serde_json::from_str(r#"{"nvrtcPath": "/x/libnvrtc.so"}"#).unwrap_or_default();
        assert_eq!(s.nvrtc_path, Some(PathBuf::from("/x/libnvrtc.so")));
        assert_eq!(s.arch, "sm_90");
        assert_eq!(ToolchainSettings::default().arch, "sm_90");
    }

    #[test]
    fn bogus_setting_and_empty_env_give_a_clear_error() {
        let tmp = std::env::temp_dir().join(format!("kernel-lsp-locate-{}", std::process::id()));
        let root = tmp.join("cuda-root");
        let _ = std::fs::create_dir_all(root.join("lib64"));
        let settings = ToolchainSettings {
            nvrtc_path: Some(PathBuf::from("/nonexistent/libnvrtc.so.99")),
            ..Default::default()
        };
        let env = SearchEnv {
            cuda_roots: vec![root.clone()],
            python_sys_path: Some(vec![tmp.join("site")]),
            ..Default::default()
        };
        let tc = locate_in(&settings, &env);
        let _ = std::fs::remove_dir_all(&tmp);
        let msg = match &tc.nvrtc {
            Ok(n) => panic!("found {:?} in an empty environment", n.path()),
            Err(e) => e.to_string(),
        };
        let msg = msg.replace(&tmp.display().to_string(), "$TMP");
        expect_test::expect!["libnvrtc not found, so kernels cannot be compiled as you type. Searched: /nonexistent/libnvrtc.so.99 (kernel-lsp.nvrtcPath), CUDA installs $TMP/cuda-root (lib64, lib, targets/x86_64-linux/lib), pip wheels (nvidia/cuda_nvrtc/lib, nvidia/cu13/lib) in $TMP/site. Install the nvidia-cuda-nvrtc-cu12 wheel (pip install nvidia-cuda-nvrtc-cu12) or the CUDA toolkit, or set kernel-lsp.nvrtcPath to libnvrtc.so or its folder"].assert_eq(&msg);
        assert!(tc.ptxas.is_none());
        assert!(tc.include_dirs.is_empty());
        expect_test::expect![[r#"
            kernel-lsp.nvrtcPath = /nonexistent/libnvrtc.so.99 has no usable libnvrtc; searching the usual places
            ptxas not found, so no register or spill counts (searched: $TMP/cuda-root/bin, $TMP/site/nvidia/cuda_nvcc/bin, $TMP/site/nvidia/cu13/bin, $PATH). Install the nvidia-cuda-nvcc-cu12 wheel or the CUDA toolkit, or set kernel-lsp.ptxasPath
            cuda_fp16.h not found, so kernels that include CUDA headers will not compile (searched: $TMP/cuda-root/include, $TMP/cuda-root/targets/x86_64-linux/include, $TMP/site/nvidia/cuda_runtime/include, $TMP/site/nvidia/cu13/include). Install the nvidia-cuda-runtime-cu12 wheel or the CUDA toolkit, or set kernel-lsp.cudaInclude"#]]
            .assert_eq(&tc.notes.join("\n").replace(&tmp.display().to_string(), "$TMP"));
    }

    #[test]
    fn a_broken_library_is_reported_not_loaded() {
        let tmp = std::env::temp_dir().join(format!("kernel-lsp-broken-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&tmp);
        let _ = std::fs::write(tmp.join("libnvrtc.so"), "not an ELF file");
        let settings = ToolchainSettings {
            nvrtc_path: Some(tmp.clone()),
            ..Default::default()
        };
        let env = SearchEnv {
            python_sys_path: Some(Vec::new()),
            ..Default::default()
        };
        let tc = locate_in(&settings, &env);
        let _ = std::fs::remove_dir_all(&tmp);
        let msg = tc.nvrtc.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("first load failure"), "{msg}");
        assert!(msg.contains("cannot be used as NVRTC"), "{msg}");
    }

    fn touch(p: &Path) {
        if let Some(d) = p.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        let _ = std::fs::write(p, "");
    }

    #[test]
    fn cuda13_toolkit_and_cu12_wheel_layouts() {
        let tmp = std::env::temp_dir().join(format!("kernel-lsp-layouts-{}", std::process::id()));
        // CUDA 13 toolkit: CCCL moved to include/cccl.
        let root = tmp.join("cuda-13.0");
        touch(&root.join("include/cuda_fp16.h"));
        touch(&root.join("include/cccl/nv/target"));
        touch(&root.join("bin/ptxas"));
        // CUDA 12 pip wheels: runtime headers and CCCL in separate wheels.
        let sp = tmp.join("site-packages");
        touch(&sp.join("nvidia/cuda_runtime/include/cuda_fp16.h"));
        touch(&sp.join("nvidia/cuda_cccl/include/nv/target"));
        touch(&sp.join("nvidia/cuda_nvcc/bin/ptxas"));

        let toolkit = locate_in(
            &ToolchainSettings::default(),
            &SearchEnv {
                cuda_roots: vec![root.clone()],
                python_sys_path: Some(Vec::new()),
                ..Default::default()
            },
        );
        let wheels = locate_in(
            &ToolchainSettings::default(),
            &SearchEnv {
                python_sys_path: Some(vec![sp.clone()]),
                ..Default::default()
            },
        );
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(toolkit.ptxas, Some(root.join("bin/ptxas")));
        assert_eq!(
            toolkit.include_dirs,
            [root.join("include"), root.join("include/cccl")]
        );
        assert_eq!(wheels.ptxas, Some(sp.join("nvidia/cuda_nvcc/bin/ptxas")));
        assert_eq!(
            wheels.include_dirs,
            [
                sp.join("nvidia/cuda_runtime/include"),
                sp.join("nvidia/cuda_cccl/include")
            ]
        );
    }

    #[test]
    fn versioned_dirs_newest_first() {
        let tmp = std::env::temp_dir().join(format!("kernel-lsp-ver-{}", std::process::id()));
        for v in ["cuda-12.4", "cuda-13.0", "cuda-12.10", "cuda-x", "other"] {
            let _ = std::fs::create_dir_all(tmp.join(v));
        }
        let got: Vec<String> = versioned_cuda_dirs(&tmp)
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(got, ["cuda-13.0", "cuda-12.10", "cuda-12.4"]);
    }

    #[test]
    fn siblings_of_pip_and_toolkit_layouts() {
        let pip = Path::new("/sp/nvidia/cuda_nvrtc/lib");
        assert!(sibling_bin_dirs(pip).contains(&PathBuf::from("/sp/nvidia/cuda_nvcc/bin")));
        assert!(
            sibling_include_dirs(pip).contains(&PathBuf::from("/sp/nvidia/cuda_runtime/include"))
        );
        let cu13 = Path::new("/sp/nvidia/cu13/lib");
        assert!(sibling_bin_dirs(cu13).contains(&PathBuf::from("/sp/nvidia/cu13/bin")));
        let tk = Path::new("/usr/local/cuda/targets/x86_64-linux/lib");
        assert!(sibling_bin_dirs(tk).contains(&PathBuf::from("/usr/local/cuda/bin")));
        assert!(sibling_include_dirs(Path::new("/usr/local/cuda/lib64"))
            .contains(&PathBuf::from("/usr/local/cuda/include")));
    }
}
