-- Runs etc/slurm/job_submit.lua the way slurmctld's job_submit/lua does, against a fake `slurm`
-- table, a settable clock and job descriptors whose writes are recorded.
-- usage: lua5.1 driver.lua HOOK CASE   (CASE: a Lua file returning {env=..., now=..., calls={...}})
local hook, case_file = arg[1], arg[2]
local case = dofile(case_file)
local logs = {}
slurm = {
    SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, NO_VAL16 = 65534,
    log_info = function(fmt, ...) logs[#logs + 1] = string.format(fmt, ...) end,
}
local clock = case.now
os.time = function() return clock end
local getenv = os.getenv
os.getenv = function(name)
    if case.env[name] ~= nil then return case.env[name] end
    return getenv(name)
end

local function apply_files(files)
    for path, text in pairs(files or {}) do
        if text == false then
            os.remove(path)
        else
            local out = assert(io.open(path, "w"))
            out:write(text)
            out:close()
        end
    end
end

-- Like Slurm's job_desc userdata: reads go to the descriptor, writes are recorded.
local function job_desc(fields, writes)
    return setmetatable({}, {
        __index = function(_, key) return fields[key] end,
        __newindex = function(_, key, value)
            fields[key] = value
            writes[#writes + 1] = key
        end,
    })
end

local function quote(value)
    return (string.format("%q", tostring(value)):gsub("\n", "n"))
end

-- Counts the files the hook opens per submission (it may read at most one).
local opened = 0
local open = io.open
io.open = function(path, mode)
    opened = opened + 1
    return open(path, mode)
end

apply_files(case.files)
dofile(hook)
for i, call in ipairs(case.calls) do
    clock = call.now or clock
    apply_files(call.files)
    logs, opened = {}, 0
    local fields, writes = call.job, {}
    local rc = slurm_job_submit(job_desc(fields, writes), call.parts or { gpu = { flag_default = 1 } }, 0)
    print("call " .. i .. " rc " .. tostring(rc) .. " opened " .. opened)
    for _, key in ipairs(writes) do
        print("set " .. key .. " " .. quote(fields[key]))
    end
    for _, line in ipairs(logs) do
        print("log " .. quote(line))
    end
end
