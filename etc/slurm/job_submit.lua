--[[
compass job_submit/lua hook: every GPU job submitted while the compass daemon is
alive is handed to the daemon, whatever command submitted it (sbatch, srun, salloc,
job arrays, workflow managers).

Install next to slurm.conf as job_submit.lua and set JobSubmitPlugins=lua
(Lua 5.1, as Debian's job_submit_lua.so uses). For a GPU job it does what the
compass-sbatch wrapper does: the marker token in the comment (the user's own
comment kept after it) and a begin-time lease, so that the job waits for the
daemon to place it, and Slurm starts it by itself when the lease runs out.

Fail-open: it changes nothing unless its config reads cleanly and the daemon's
anchors file says the daemon is alive (its generated= is at most `staleness`
seconds old). It never rejects a job (every path returns slurm.SUCCESS, errors
included) and does no I/O but reading at most one small file per submission: the
anchors file at most once a second, its config every CONFIG_TTL seconds, never both in one
submission (but once: the first GPU submission after its config appears reads both).
Problems with either file are logged once, when they appear.

Rules for a GPU job while the daemon is alive (one log line each):
  - already marked (the wrapper, or the user's own token): the comment is kept;
    the lease is added unless the job begins a lease from now (the wrapper's,
    give or take 10 s) or carries <marker>:leased (the wrapper's lease past the
    user's own begin); a later begin the user marked by hand gets the lease past
    it, as below;
  - a user --begin in the future: managed, its begin time moved on by the lease
    (the daemon leaves it alone until the user's begin time, then places it);
  - a user nodelist (-w), a reservation, a heterogeneous job component, or an
    exclusive mode other than whole-node (--exclusive=user|mcs|topo): left to Slurm
    (the user chose the nodes, or which nodes qualify depends on other jobs);
  - --gpus-per-socket: left to Slurm (the daemon does not read the nodes' sockets);
  - a comment with no room for the marker (Slurm takes 1024 bytes): left to Slurm;
  - --exclusive (whole node): managed, the daemon gives it a node of its own;
  - --hold: managed like any other (it runs when the user releases it);
  - an explicit --requeue adds the token <marker>:requeue, which the daemon counts
    as migratable when its config says migratable = "requeue";
  - interactive allocations (salloc, srun outside a job): managed with
    interactive_lease unless interactive = unmanaged;
  - a GPU request the hook cannot read: left to Slurm unchanged.

Config file: COMPASS_HOOK_CONFIG in slurmctld's environment, else
/run/compass/hook.conf; written by `compass daemon` at start (setting hook_config)
or by the admin. `key = value` lines, `#` comments:
  anchors, staleness, lease, interactive (managed|unmanaged), interactive_lease,
  marker, partitions (comma list; empty: every partition).
--]]

local CONFIG_PATH = os.getenv("COMPASS_HOOK_CONFIG") or "/run/compass/hook.conf"
local CONFIG_TTL = 10
local READ_LIMIT = 4096
-- how far from a lease from now a marked job's begin may be and still be the wrapper's "now+lease" (resolved on
-- the login node, whose clock may differ from slurmctld's, and a moment before the hook runs)
local CLOCK_SLACK = 10
-- the longest job comment Slurm takes, in bytes (job_mgr.c, _test_strlen): one the marker makes longer is refused
local MAX_COMMENT = 1024
local NO_VAL = (slurm and slurm.NO_VAL) or 4294967294
local NO_VAL16 = (slurm and slurm.NO_VAL16) or 65534
local SHARED_NONE, SHARED_OK = 0, 1
local GPU_FIELDS = { "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket" }

local KINDS = {
    anchors = "path", staleness = "seconds", lease = "seconds", interactive = "choice",
    interactive_lease = "seconds", marker = "token", partitions = "list",
}
local CHOICES = { interactive = { managed = true, unmanaged = true } }

-- What the hook knows between submissions (slurmctld keeps one Lua state).
local cache = {
    config = nil, config_problem = nil, config_read = nil,
    generated = nil, anchors_problem = nil, anchors_read = nil, alive_when_read = false,
    health = nil,
}

local function log(message)
    -- job names and requests are the user's: no control characters (a newline would forge a log line)
    slurm.log_info("%s", "compass: " .. message:gsub("%c", "?"))
end

local function trim(text)
    return (text:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function read_small(path)
    local file, err = io.open(path, "r")
    if not file then
        return nil, err
    end
    local text, read_err = file:read(READ_LIMIT)
    file:close()
    if text == nil and read_err ~= nil then
        return nil, path .. ": " .. read_err
    end
    return text or ""
end

-- Returns the settings, or nil and what is wrong (naming the line).
local function parse_config(text)
    local config = { partitions = {} }
    local number = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        number = number + 1
        local body = trim((line:gsub("#.*$", "")))
        if body ~= "" then
            local key, value = body:match("^([%w_]+)%s*=%s*(.-)$")
            if key == nil then
                return nil, "line " .. number .. ": not `key = value`: " .. body
            end
            value = value:match('^"(.*)"$') or value
            local kind = KINDS[key]
            if kind == nil then
                return nil, "line " .. number .. ": unknown setting " .. key
            end
            if kind == "seconds" then
                local seconds = value:match("^%d+%.?%d*$") and tonumber(value)
                if not seconds then
                    return nil, "line " .. number .. ": " .. key .. " must be a number of seconds, got " .. value
                end
                config[key] = seconds
            elseif kind == "choice" then
                if not CHOICES[key][value] then
                    return nil, "line " .. number .. ": " .. key .. " must be managed or unmanaged, got " .. value
                end
                config[key] = value
            elseif kind == "list" then
                for name in value:gmatch("[^,%s]+") do
                    config.partitions[name] = true
                end
            else
                if value == "" or (kind == "token" and not value:match("^[%w_.%-]+$")) then
                    return nil, "line " .. number .. ": " .. key .. " has no usable value: " .. value
                end
                config[key] = value
            end
        end
    end
    for _, key in ipairs({ "anchors", "staleness", "lease", "marker" }) do
        if config[key] == nil then
            return nil, "missing setting " .. key
        end
    end
    config.interactive = config.interactive or "managed"
    config.interactive_lease = config.interactive_lease or config.lease
    return config
end

local function load_config(now)
    cache.config_read = now
    local text, err = read_small(CONFIG_PATH)
    if text == nil then
        cache.config, cache.config_problem = nil, "no usable config (" .. tostring(err) .. ")"
        return
    end
    local config, problem = parse_config(text)
    cache.config = config
    cache.config_problem = problem and ("config " .. CONFIG_PATH .. " " .. problem) or nil
end

local function proven_alive(now)
    local config = cache.config
    return config ~= nil and cache.anchors_problem == nil and cache.generated ~= nil
        and math.abs(now - cache.generated) <= config.staleness
end

local function read_anchors(now, path)
    cache.anchors_read = now
    cache.alive_when_read = false
    local text, err = read_small(path)
    if text == nil then
        cache.generated, cache.anchors_problem = nil, "anchors file unreadable (" .. tostring(err) .. ")"
        return
    end
    local generated = text:match("^# compass%-anchors v1 generated=(%d+)[ \n]")
    if generated == nil then
        cache.generated, cache.anchors_problem = nil, "anchors file " .. path .. " is not a compass-anchors v1 file"
        return
    end
    cache.generated, cache.anchors_problem = tonumber(generated), nil
    cache.alive_when_read = proven_alive(now)
end

-- One file read for this submission, when one is due. The anchors file wins when a reading that
-- proved the daemon alive has aged out (the daemon has most likely written a newer one since);
-- otherwise the config when it is CONFIG_TTL old, else the anchors file once a second. So a
-- config changed while the daemon is not alive (an anchors path fixed, a daemon started with
-- other settings) is read within CONFIG_TTL, not only when slurmctld reloads this script.
-- (Trusting a reading a few seconds old is safe: if the daemon died since, the job's lease runs
-- out and Slurm starts it.)
local function refresh(now)
    local config_due = cache.config_read == nil or now - cache.config_read >= CONFIG_TTL
    if cache.config == nil then
        if cache.config_read ~= now then
            load_config(now)
            if cache.config ~= nil then
                read_anchors(now, cache.config.anchors) -- the one exception: the config has just appeared
            end
        end
    elseif not proven_alive(now) and (cache.alive_when_read or not config_due) then
        if cache.anchors_read ~= now then
            read_anchors(now, cache.config.anchors)
        end
    elseif config_due then
        load_config(now)
    elseif cache.anchors_read ~= now then
        read_anchors(now, cache.config.anchors)
    end
end

-- The config when the daemon is alive, else nil; says so once whenever that changes.
local function alive_config(now)
    refresh(now)
    local config, health = cache.config, nil
    if config == nil then
        health = cache.config_problem
    elseif cache.anchors_problem ~= nil then
        health = cache.anchors_problem
    elseif not proven_alive(now) then
        health = string.format("daemon not alive (anchors generated %d s ago, staleness %g s)",
            now - (cache.generated or 0), config.staleness)
    end
    local key = health and health:gsub("%-?%d+ s ago", "") or "alive"
    if key ~= cache.health then
        cache.health = key
        log((health or "daemon alive") .. (health and ": GPU jobs are left to Slurm unchanged"
            or ": GPU jobs are managed"))
    end
    if health ~= nil then
        return nil
    end
    return config
end

-- The GPU entries of the job's TRES requests, or nil and the entry that cannot be read.
local function gpu_request(job_desc)
    local found = {}
    for _, field in ipairs(GPU_FIELDS) do
        local value = job_desc[field]
        if value ~= nil and value ~= "" then
            for entry in value:gmatch("[^,]+") do
                entry = trim(entry)
                local rest = entry:match("^gres[:/]gpu(.*)$") or entry:match("^gpu(.*)$")
                local sep = rest and rest:sub(1, 1)
                if rest ~= nil and (rest == "" or sep == ":" or sep == "=") then
                    -- gpu, gpu:N, gpu:type, gpu:type:N; 23.02 on also write gpu=N and gpu:type=N
                    rest = rest:gsub("=(%d+)$", ":%1")
                    local count
                    if rest == "" then
                        count = 1
                    else
                        local first, second = rest:match("^:([^:]+):([^:]+)$")
                        local only = rest:match("^:([^:]+)$")
                        if first ~= nil and first:match("^[%w_.%-]+$") and second:match("^%d+$") then
                            count = tonumber(second)
                        elseif only ~= nil and only:match("^%d+$") then
                            count = tonumber(only)
                        elseif only ~= nil and only:match("^[%a_][%w_.%-]*$") then
                            count = 1 -- a type alone: one GPU of it
                        end
                    end
                    if count == nil then
                        return nil, field .. "=" .. value
                    end
                    if count > 0 then
                        found[#found + 1] = field .. "=" .. entry
                    end
                end
            end
        end
    end
    return found
end

local function has_token(comment, token)
    for word in comment:gmatch("[^%s,;]+") do
        if word == token then
            return true
        end
    end
    return false
end

local function default_partition(part_list)
    for name, part in pairs(part_list or {}) do
        if part.flag_default == 1 then
            return name
        end
    end
    return nil
end

local function in_scope(config, job_desc, part_list)
    if next(config.partitions) == nil then
        return true
    end
    local wanted = job_desc.partition or default_partition(part_list) or ""
    for name in wanted:gmatch("[^,]+") do
        if config.partitions[name] then
            return true
        end
    end
    return false
end

-- Why the job is left to Slurm, or nil to manage it; gpus: its GPU entries (gpu_request's).
local function left_to_slurm(config, job_desc, part_list, gpus)
    if job_desc.req_nodes ~= nil and job_desc.req_nodes ~= "" then
        return "user nodelist " .. job_desc.req_nodes
    end
    for _, entry in ipairs(gpus) do
        if entry:find("^tres_per_socket=") then
            -- GPUs per socket depend on the nodes' sockets, which the daemon does not read
            return "--gpus-per-socket is Slurm's to place"
        end
    end
    if job_desc.reservation ~= nil and job_desc.reservation ~= "" then
        return "runs in reservation " .. job_desc.reservation
    end
    local het = job_desc.het_job_offset
    if het ~= nil and het ~= NO_VAL then
        return "heterogeneous job component"
    end
    local shared = job_desc.shared
    if shared ~= nil and shared ~= NO_VAL16 and shared ~= SHARED_NONE and shared ~= SHARED_OK then
        return "exclusive mode " .. shared .. " (user, mcs or topo) depends on other jobs' owners"
    end
    if not in_scope(config, job_desc, part_list) then
        return "partition " .. tostring(job_desc.partition or "default") .. " is not managed"
    end
    if job_desc.script == nil and config.interactive == "unmanaged" then
        return "interactive allocation (interactive = unmanaged)"
    end
    return nil
end

local function describe(job_desc, submit_uid, gpus)
    return string.format("job %s of uid %s (%s)", tostring(job_desc.name or "?"),
        tostring(job_desc.user_id or submit_uid), table.concat(gpus, " "))
end

local function submit(job_desc, part_list, submit_uid)
    local gpus, unreadable = gpu_request(job_desc)
    if gpus == nil then
        log("GPU request " .. unreadable .. " not understood: job " .. tostring(job_desc.name or "?")
            .. " left to Slurm unchanged")
        return
    end
    if #gpus == 0 then
        return -- not a GPU job: none of our business
    end
    local now = os.time()
    local config = alive_config(now)
    if config == nil then
        return
    end
    local what = describe(job_desc, submit_uid, gpus)
    local why = left_to_slurm(config, job_desc, part_list, gpus)
    local comment = job_desc.comment or ""
    local begin = job_desc.begin_time or 0
    local interactive = job_desc.script == nil
    local lease = interactive and config.interactive_lease or config.lease
    local marked = has_token(comment, config.marker) or has_token(comment, config.marker .. ":migratable")
    if why ~= nil then
        log(what .. " left to Slurm: " .. why)
        return
    end
    local tokens = marked and "" or config.marker
    if job_desc.requeue == 1 and not has_token(comment, config.marker .. ":requeue") then
        tokens = trim(tokens .. " " .. config.marker .. ":requeue")
    end
    local new_comment = trim(tokens .. " " .. comment)
    if #new_comment > MAX_COMMENT then
        log(what .. " left to Slurm: its comment leaves no room for the marker (Slurm takes " .. MAX_COMMENT
            .. " bytes)")
        return
    end
    local new_begin, note = now + math.ceil(lease), ""
    if begin > now and marked and (has_token(comment, config.marker .. ":leased") or (not interactive
            and math.abs(begin - now - math.ceil(config.lease)) <= CLOCK_SLACK)) then
        -- the wrapper's lease (it submits batch jobs only): from now, or past the user's own later begin (its
        -- token says so)
        new_begin, note = begin, ", already marked"
    elseif begin > now then
        -- the user's own --begin, plus the lease: the daemon leaves the job alone until that begin
        -- time, then places it (as the wrapper submits such a job)
        new_begin, note = begin + math.ceil(config.lease), string.format(", after the user's begin in %d s", begin - now)
    elseif marked then
        note = ", already marked"
    end
    if new_comment ~= comment then
        job_desc.comment = new_comment
    end
    if new_begin ~= begin then
        job_desc.begin_time = new_begin
    end
    log(string.format("%s managed: lease %d s%s%s", what, new_begin - now, interactive and ", interactive" or "",
        note))
end

-- Read both files while slurmctld loads the script, so that submissions find them cached.
pcall(function()
    load_config(os.time())
    if cache.config ~= nil then
        read_anchors(os.time(), cache.config.anchors)
    end
end)

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, err = pcall(submit, job_desc, part_list, submit_uid)
    if not ok then
        log("internal error (" .. tostring(err) .. "): job left as it was submitted")
    end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
