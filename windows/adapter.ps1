# deepcode Task Scheduler adapter. This script is fixed: deepcode never
# generates or edits it. Everything it acts on comes from the private
# configuration file named by -ConfigPath (written by deepcode, 0600, beside
# the database), so no path or argument is ever spliced into script text.
#
#   powershell.exe -NoLogo -NoProfile -NonInteractive -ExecutionPolicy Bypass `
#     -File deepcode-task.ps1 -Action register|unregister|start|stop|query -ConfigPath <file>
#
# Output: one line of JSON on stdout. Failure: the message on stderr, exit 1.
param(
    [Parameter(Mandatory = $true)]
    [ValidateSet('register', 'unregister', 'start', 'stop', 'query')]
    [string] $Action,
    [Parameter(Mandatory = $true)]
    [string] $ConfigPath
)

Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'
trap {
    [Console]::Error.WriteLine($_.Exception.Message)
    exit 1
}

$config = Get-Content -LiteralPath $ConfigPath -Raw -Encoding UTF8 | ConvertFrom-Json
if ($config.version -ne 1) {
    throw "unsupported deepcode task configuration version $($config.version) in $ConfigPath"
}
$name = [string] $config.taskName
$folder = [string] $config.taskPath
if ($name -notmatch '^deepcode-[a-z0-9]+$') {
    throw "refusing to act on task '$name': not a deepcode task name"
}

function Get-DeepcodeTask {
    Get-ScheduledTask -TaskName $name -TaskPath $folder -ErrorAction SilentlyContinue
}

function Write-Result($value) {
    [Console]::Out.WriteLine(($value | ConvertTo-Json -Compress -Depth 4))
}

switch ($Action) {
    'register' {
        # -Force replaces a task of the same name; the caller stops it first.
        Register-ScheduledTask -TaskName $name -TaskPath $folder -Xml ([string] $config.taskXml) -Force | Out-Null
        Write-Result @{ registered = $true }
    }
    'unregister' {
        $task = Get-DeepcodeTask
        if ($null -ne $task) {
            if ($task.State -eq 'Running') { Stop-ScheduledTask -TaskName $name -TaskPath $folder }
            Unregister-ScheduledTask -TaskName $name -TaskPath $folder -Confirm:$false
        }
        Write-Result @{ removed = ($null -ne $task) }
    }
    'start' {
        Start-ScheduledTask -TaskName $name -TaskPath $folder
        Write-Result @{ started = $true }
    }
    'stop' {
        $task = Get-DeepcodeTask
        if ($null -ne $task -and $task.State -eq 'Running') { Stop-ScheduledTask -TaskName $name -TaskPath $folder }
        Write-Result @{ stopped = $true }
    }
    'query' {
        $task = Get-DeepcodeTask
        if ($null -eq $task) {
            Write-Result @{ installed = $false }
            break
        }
        $info = $task | Get-ScheduledTaskInfo
        $exec = @($task.Actions)[0]
        Write-Result ([ordered] @{
            installed      = $true
            state          = [string] $task.State
            execute        = [string] $exec.Execute
            arguments      = [string] $exec.Arguments
            lastTaskResult = [int64] $info.LastTaskResult
            lastRunTime    = if ($info.LastRunTime) { $info.LastRunTime.ToUniversalTime().ToString('o') } else { '' }
        })
    }
}
exit 0
